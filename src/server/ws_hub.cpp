// WsHub: fan-out of serialized frames to the connected clients.
#include "server/ws_hub.h"

#include <algorithm>

namespace hr {

void WsHub::join(const std::string& client_id, std::shared_ptr<WsClient> client) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.push_back(Entry{client_id, std::move(client)});
  }
  if (on_join_) on_join_(client_id);
}

void WsHub::leave(const WsClient* client) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                [&](const Entry& e) { return e.client.get() == client; }),
                 entries_.end());
}

void WsHub::send(const std::string& client_id, const std::string& type, const Json& data) {
  auto frame = std::make_shared<const std::string>(
      Json{{"type", type}, {"data", data}}.dump(-1, ' ', false, Json::error_handler_t::replace));
  deliver(client_id, frame, false);
}

void WsHub::send_binary(const std::string& client_id, std::shared_ptr<const std::string> frame) {
  deliver(client_id, frame, true);
}

void WsHub::deliver(const std::string& client_id, const std::shared_ptr<const std::string>& frame,
                    bool binary) {
  std::vector<const WsClient*> full;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Entry& e : entries_) {
      if (!client_id.empty() && e.client_id != client_id) continue;
      if (!e.client->send(frame, binary)) full.push_back(e.client.get());
    }
  }
  for (const WsClient* c : full) {
    leave(c);
    ++dropped_;
  }
}

void WsHub::clear() {
  std::vector<Entry> gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    gone.swap(entries_);
  }
}

size_t WsHub::clients() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace hr
