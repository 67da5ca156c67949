// HR_INCBIN: a data file assembled into .rodata (Note [embedded vocabulary]).
#pragma once

#include <cstddef>
#include <string_view>

#define HR_STR2(x) #x
#define HR_STR(x) HR_STR2(x)

// Defines `sym_begin` and `sym_end` around the bytes of `path` (a string literal, absolute);
// declare them with HR_INCBIN_EXTERN(sym) before use.
// clang-format off
#define HR_INCBIN(sym, path)                  \
  __asm__(".section .rodata\n"                \
          ".global " #sym "_begin\n"          \
          ".global " #sym "_end\n"            \
          ".balign 16\n"                      \
          #sym "_begin:\n"                    \
          ".incbin \"" path "\"\n"            \
          #sym "_end:\n"                      \
          ".previous\n")
// clang-format on

#define HR_INCBIN_EXTERN(sym) extern "C" const char sym##_begin[], sym##_end[]

#define HR_INCBIN_VIEW(sym) std::string_view(sym##_begin, size_t(sym##_end - sym##_begin))
