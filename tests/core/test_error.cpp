// furnace::Error and the check macros.
#include <gtest/gtest.h>

#include "furnace/error.h"

namespace furnace {
namespace {

TEST(Error, CheckThrowsWithMessageStatementAndLocation) {
  int x = 3;
  try {
    FURNACE_CHECK(x > 5) << "x was " << x;
    FAIL() << "FURNACE_CHECK did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "x was 3");
    EXPECT_EQ(e.statement(), "x > 5");
    EXPECT_NE(e.file().find("test_error.cpp"), std::string::npos);
    EXPECT_GT(e.line(), 0);
    EXPECT_EQ(e.device(), -1);
  }
}

TEST(Error, CheckPassesWithoutEvaluatingTheMessage) {
  int evaluated = 0;
  auto side_effect = [&] { return ++evaluated; };
  FURNACE_CHECK(true) << side_effect();
  EXPECT_EQ(evaluated, 0);
}

TEST(Error, DeviceCheckCarriesTheDevice) {
  try {
    FURNACE_CHECK_DEVICE(false, 3) << "boom";
  } catch (const Error& e) {
    EXPECT_EQ(e.device(), 3);
    return;
  }
  FAIL();
}

TEST(Error, OutOfMemoryIsAnError) {
  EXPECT_THROW(throw OutOfMemoryError("CUDA out of memory."), Error);
}

}  // namespace
}  // namespace furnace
