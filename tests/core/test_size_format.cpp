// format_size (PyTorch's, shared/reference/semantics.md §4) and parse_size (the CLI's input).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "furnace/allocator.h"  // defines: format_size, parse_size
#include "furnace/error.h"      // defines: Error

namespace furnace {
namespace {

constexpr uint64_t KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB, TiB = 1024 * GiB;

struct FormatRow {
  uint64_t bytes;
  const char* text;
};

class FormatSize : public ::testing::TestWithParam<FormatRow> {};

TEST_P(FormatSize, MatchesPyTorch) { EXPECT_EQ(format_size(GetParam().bytes), GetParam().text); }

INSTANTIATE_TEST_SUITE_P(
    SemanticsMd, FormatSize,
    ::testing::Values(FormatRow{0, "0 bytes"}, FormatRow{1, "1 bytes"},
                      FormatRow{512, "512 bytes"},
                      FormatRow{1024, "1024 bytes"},          // up to 1024: bytes
                      FormatRow{1025, "1.00 KiB"},
                      FormatRow{1536, "1.50 KiB"},
                      FormatRow{1 * MiB, "1024.00 KiB"},      // exactly 1 MiB: still KiB
                      FormatRow{1 * MiB + 1, "1.00 MiB"},
                      FormatRow{2 * MiB, "2.00 MiB"},
                      FormatRow{20 * MiB, "20.00 MiB"},
                      FormatRow{13107200, "12.50 MiB"},
                      FormatRow{1 * GiB, "1024.00 MiB"},      // exactly 1 GiB: still MiB
                      FormatRow{1 * GiB + 1, "1.00 GiB"},
                      FormatRow{8 * GiB, "8.00 GiB"},
                      FormatRow{8364425216, "7.79 GiB"},
                      FormatRow{3 * GiB / 1000, "3.07 MiB"},
                      FormatRow{1 * TiB, "1024.00 GiB"},
                      FormatRow{UINT64_MAX, "17179869184.00 GiB"}));  // never scientific

struct ParseRow {
  const char* text;
  uint64_t bytes;
};

class ParseSizeGood : public ::testing::TestWithParam<ParseRow> {};

TEST_P(ParseSizeGood, Parses) { EXPECT_EQ(parse_size(GetParam().text), GetParam().bytes); }

INSTANTIATE_TEST_SUITE_P(
    Inputs, ParseSizeGood,
    ::testing::Values(ParseRow{"0", 0}, ParseRow{"1", 1}, ParseRow{"512", 512},
                      ParseRow{"512B", 512}, ParseRow{"1KiB", KiB}, ParseRow{"5MiB", 5 * MiB},
                      ParseRow{"30MiB", 30 * MiB}, ParseRow{"1.5GiB", 3 * GiB / 2},
                      ParseRow{"8GiB", 8 * GiB}, ParseRow{"2TiB", 2 * TiB},
                      ParseRow{"2KB", 2000}, ParseRow{"30MB", 30000000},
                      ParseRow{"1.5GB", 1500000000}, ParseRow{"1TB", 1000000000000},
                      ParseRow{"0.5KiB", 512}, ParseRow{"2.0", 2}, ParseRow{"2.50MB", 2500000},
                      ParseRow{"5mib", 5 * MiB}, ParseRow{"5 MiB", 5 * MiB},
                      ParseRow{"  7gb  ", 7000000000}, ParseRow{"007", 7},
                      ParseRow{"1.125KiB", 1152}, ParseRow{"0.000001MB", 1},
                      ParseRow{"18446744073709551615", UINT64_MAX},
                      ParseRow{"16777215TiB", UINT64_MAX - TiB + 1}));

class ParseSizeBad : public ::testing::TestWithParam<const char*> {};

TEST_P(ParseSizeBad, ThrowsOneClearLine) {
  const std::string text = GetParam();
  try {
    parse_size(text);
    FAIL() << "accepted '" << text << "'";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_THAT(what, ::testing::StartsWith("invalid size '" + text + "': "));
    EXPECT_EQ(what.find('\n'), std::string::npos);
  }
}

INSTANTIATE_TEST_SUITE_P(Inputs, ParseSizeBad,
                         ::testing::Values("", "   ", "-5", "-1MiB", "abc", "MiB", "5XB", "5 M",
                                           "1.", ".5", "1.5", "0.1KiB", "1e3", "+5", "0x10",
                                           "5 MiB x", "5MiB5", "1,5MiB", "1.2.3",
                                           "18446744073709551616", "20000000TiB",
                                           "99999999999999999999999", "1.0000000000000000001"));

TEST(ParseSize, MessagesSayWhatIsWrong) {
  auto message = [](const char* text) {
    try {
      parse_size(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(message(""),
            "invalid size '': empty (expected a number with an optional unit, e.g. 512, 5MiB, "
            "1.5GiB)");
  EXPECT_EQ(message("-5"), "invalid size '-5': a size cannot be negative");
  EXPECT_EQ(message("5XB"),
            "invalid size '5XB': unknown unit 'XB' (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)");
  EXPECT_EQ(message("1.5"), "invalid size '1.5': not a whole number of bytes");
  EXPECT_EQ(message("20000000TiB"),
            "invalid size '20000000TiB': too large (the limit is 2^64 - 1 bytes)");
}

TEST(FormatAndParse, RoundTripOfWholeUnits) {
  for (uint64_t n : {2 * MiB, 20 * MiB, 512 * MiB, 3 * GiB}) {
    const std::string text = format_size(n);  // "2.00 MiB"
    EXPECT_EQ(parse_size(text), n) << text;
  }
}

}  // namespace
}  // namespace furnace
