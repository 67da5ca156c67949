// The lines `headroom run` writes while a prompt runs, from a script of executor events on a
// fake clock: plain lines for a file or a pipe, and what a terminal shows after the redraws.
#include "cli/progress/run_progress.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace hr {
namespace {

// A FILE* writing into memory, and the fake clock both the line and the progress read.
class ProgressTest : public ::testing::Test {
 protected:
  void SetUp() override { out_ = open_memstream(&buf_, &size_); }
  void TearDown() override {
    std::fclose(out_);
    std::free(buf_);
  }
  std::string written() {
    std::fflush(out_);
    return std::string(buf_, size_);
  }
  ProgressClock clock() {
    return [this] { return now_; };
  }

  static ExecEvent executing(const std::string& id, const std::string& cls) {
    ExecEvent e{ExecEvent::Kind::EXECUTING};
    e.node_id = id;
    e.class_type = cls;
    return e;
  }
  static ExecEvent progress(int value, int max) {
    ExecEvent e{ExecEvent::Kind::PROGRESS};
    e.node_id = "3";
    e.class_type = "KSampler";
    e.value = value;
    e.max = max;
    return e;
  }

  // The default workflow's shape: a loader, a sampler of `steps` steps each `step_s` long,
  // a decoder that takes a memory decision, and the saver.
  void script(RunProgress& p, int steps, double step_s) {
    p.on_event(executing("4", "CheckpointLoaderSimple"));
    now_ += 0.25;
    p.on_event(executing("3", "KSampler"));
    now_ += 0.5;  // the sampler's set-up
    for (int i = 1; i <= steps; ++i) {
      now_ += step_s;
      p.on_event(progress(i, steps));
    }
    p.on_event(executing("8", "VAEDecode"));
    ExecEvent m{ExecEvent::Kind::MEMORY, "8", "VAEDecode"};
    m.message = "VAE decode tiled 2x2 at 64 px";
    p.on_event(m);
    now_ += 0.25;
    p.on_event(executing("9", "SaveImage"));
    now_ += 0.0625;
  }

  static std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> lines;
    std::stringstream ss(text);
    for (std::string l; std::getline(ss, l);) lines.push_back(l);
    return lines;
  }

  // What a terminal shows: '\r' returns to the line's start, and later glyphs overwrite.
  static std::string screen_of(const std::string& text) {
    std::vector<std::vector<std::string>> rows(1);
    size_t col = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      const char c = text[i];
      if (c == '\r') {
        col = 0;
        continue;
      }
      if (c == '\n') {
        rows.emplace_back();
        col = 0;
        continue;
      }
      size_t n = 1;  // the bytes of one UTF-8 glyph
      while (i + n < text.size() && (static_cast<unsigned char>(text[i + n]) & 0xC0) == 0x80) ++n;
      std::vector<std::string>& row = rows.back();
      if (col >= row.size()) row.resize(col + 1);
      row[col++] = text.substr(i, n);
      i += n - 1;
    }
    std::string screen;
    for (const auto& row : rows) {
      std::string line;
      for (const std::string& g : row) line += g;
      while (!line.empty() && line.back() == ' ') line.pop_back();
      screen += line + "\n";
    }
    return screen;
  }

  std::FILE* out_ = nullptr;
  char* buf_ = nullptr;
  size_t size_ = 0;
  double now_ = 100;
};

TEST_F(ProgressTest, PlainLinesForAFileOrAPipe) {
  ConsoleLine line(false, out_, clock());
  RunProgress p(line, 4, clock());
  script(p, 4, 0.5);
  p.finish(true);
  EXPECT_EQ(written(),
            "headroom: [1/4] node 4 CheckpointLoaderSimple\n"
            "headroom: [1/4] node 4 CheckpointLoaderSimple done in 0.25 s\n"
            "headroom: [2/4] node 3 KSampler\n"
            "headroom: [2/4] node 3 KSampler  25%|##        | 1/4 [00:01<00:03,  1.00it/s]\n"
            "headroom: [2/4] node 3 KSampler  50%|#####     | 2/4 [00:01<00:01,  1.42it/s]\n"
            "headroom: [2/4] node 3 KSampler  75%|#######   | 3/4 [00:02<00:00,  1.63it/s]\n"
            "headroom: [2/4] node 3 KSampler 100%|##########| 4/4 [00:02<00:00,  1.76it/s]\n"
            "headroom: [2/4] node 3 KSampler done in 2.50 s\n"
            "headroom: [3/4] node 8 VAEDecode\n"
            "headroom: node 8 VAEDecode: VAE decode tiled 2x2 at 64 px\n"
            "headroom: [3/4] node 8 VAEDecode done in 0.25 s\n"
            "headroom: [4/4] node 9 SaveImage\n"
            "headroom: [4/4] node 9 SaveImage done in 0.06 s\n"
            "headroom: prompt executed in 3.06 s\n");
}

// Note [run progress]: a bar is a plain line at every tenth of its steps.
TEST_F(ProgressTest, PlainBarLinesAtEveryTenth) {
  ConsoleLine line(false, out_, clock());
  RunProgress p(line, 4, clock());
  script(p, 1000, 0.01);
  p.finish(true);
  const std::string text = written();
  int bars = 0;
  for (const std::string& l : lines_of(text)) bars += l.find("%|") != std::string::npos;
  EXPECT_EQ(bars, 10) << text;
  EXPECT_NE(text.find("|##########| 1000/1000 [00:10<00:00, 100.00it/s]\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("| 100/1000 ["), std::string::npos) << text;
  EXPECT_EQ(text.find('\r'), std::string::npos);
}

TEST_F(ProgressTest, TerminalShowsOneLinePerNode) {
  ConsoleLine line(true, out_, clock());
  RunProgress p(line, 4, clock());
  script(p, 20, 0.1);
  p.finish(true);
  const std::string text = written();
  EXPECT_NE(text.find('\r'), std::string::npos);
  EXPECT_EQ(screen_of(text),
            "headroom: [1/4] node 4 CheckpointLoaderSimple done in 0.25 s\n"
            "headroom: [2/4] node 3 KSampler 100%|██████████| 20/20 [00:02<00:00,  9.98it/s] done "
            "in 2.50 s\n"
            "headroom: node 8 VAEDecode: VAE decode tiled 2x2 at 64 px\n"
            "headroom: [3/4] node 8 VAEDecode done in 0.25 s\n"
            "headroom: [4/4] node 9 SaveImage done in 0.06 s\n"
            "headroom: prompt executed in 3.06 s\n"
            "\n");
}

// Note [bar redraw rate]: 1000 steps in 1 s are not 1000 redraws.
TEST_F(ProgressTest, TerminalRedrawsAtMostTwentyTimesASecond) {
  ConsoleLine line(true, out_, clock());
  RunProgress p(line, 4, clock());
  script(p, 1000, 0.001);
  p.finish(true);
  const std::string text = written();
  size_t redraws = 0;
  for (char c : text) redraws += c == '\r';
  EXPECT_LT(redraws, 60u) << text.size();
  EXPECT_NE(screen_of(text).find("| 1000/1000 [00:01<00:00, 1000.00it/s] done in 1.50 s\n"),
            std::string::npos)
      << screen_of(text);
}

TEST_F(ProgressTest, AFailedNodeSaysHowLongItRan) {
  for (bool tty : {false, true}) {
    ConsoleLine line(tty, out_, clock());
    RunProgress p(line, 7, clock());
    p.on_event(executing("4", "CheckpointLoaderSimple"));
    now_ += 0.5;
    p.finish(false);
  }
  EXPECT_EQ(screen_of(written()),
            "headroom: [1/7] node 4 CheckpointLoaderSimple\n"
            "headroom: [1/7] node 4 CheckpointLoaderSimple failed after 0.50 s\n"
            "headroom: [1/7] node 4 CheckpointLoaderSimple failed after 0.50 s\n"
            "\n");
}

}  // namespace
}  // namespace hr
