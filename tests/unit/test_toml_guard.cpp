// toml_ascii (furnace/toml_reader.h): the ASCII form of a TOML document that Debian's
// toml++ 3.3.0 parses without reaching its undefined behaviour, holding the same values.
#include <gtest/gtest.h>

#include <string>
#include <toml++/toml.h>

#include "furnace/error.h"
#include "furnace/toml_reader.h"  // defines: toml_ascii, toml_type_name, nearest_name

namespace furnace {
namespace {

toml::table parse(const std::string& text) { return toml::parse(std::string_view(text), std::string_view("t.toml")); }

// The rewritten text is ASCII and parses to the same table as the original (for texts toml++ reads
// safely even without the rewrite).
void expect_same_document(const std::string& text) {
  const std::string ascii = toml_ascii(text, "t.toml");
  for (char c : ascii) ASSERT_LT(static_cast<unsigned char>(c), 0x80) << ascii;
  EXPECT_EQ(parse(ascii), parse(text)) << text << "\n->\n" << ascii;
}

TEST(TomlAscii, AsciiTextIsUnchanged) {
  const std::string text = "name = \"x\" # c\n[host]\npinned_gbps = 25\ns = \"\"\"a\\\n  b\"\"\"\n";
  EXPECT_EQ(toml_ascii(text, "t.toml"), text);
}

TEST(TomlAscii, StringsKeepTheirValues) {
  expect_same_document("a = \"显卡 GPU\"\nb = \"\\\"q\\\" 中\"\n");
  expect_same_document("a = 'C:\\path \"中\"'\nb = ''\n");
  expect_same_document("a = '''\n第一行\n'\\x' ''\"'''\nb = \"\"\"\n多行\n\"\"\"\"\n");
  expect_same_document("\"键\" = 1\n'鍵' = 2\n[\"表\"]\nx = 1 # 注释\n");
  expect_same_document("a = \"\U0001F525\"\n");  // beyond the basic plane: \UXXXXXXXX
  // The inputs that reach toml++'s TOML_UNREACHABLE (marzer/tomlplusplus #190, #295): the original
  // cannot be parsed safely, so the value is checked directly.
  const std::string ascii = toml_ascii("s = \"\"\"\\\n   \xC2\xA7 \u3002\"\"\"\n", "t.toml");
  EXPECT_EQ(parse(ascii)["s"].value<std::string>(), std::string("\xC2\xA7 \u3002"));
  EXPECT_EQ(parse(toml_ascii("a = '、' # 。\n", "t.toml"))["a"].value<std::string>(), std::string("、"));
}

TEST(TomlAscii, AdjacentStringsStayAnError) {
  for (const char* text : {"s = \"\"\"e\"\"\"\"'", "s = ''\"a\"\"\"", "s = '''a'''\"", "s = 'a'\"b\""}) {
    EXPECT_THROW(parse(text), toml::parse_error) << text;
    EXPECT_THROW(parse(toml_ascii(text, "t.toml")), toml::parse_error) << text;
  }
}

TEST(TomlAscii, NonAsciiOutsideStringsIsOneLine) {
  try {
    toml_ascii("name = \"x\"\nn\xD0\xB0me = 1\n", "dir/t.toml");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "dir/t.toml:2:2: byte 0xD0 starts a non-ASCII character outside a string or comment");
  }
  EXPECT_THROW(toml_ascii("a = \"\xFF\"", "t.toml"), Error);          // not UTF-8
  EXPECT_THROW(toml_ascii("a = \"\xE4\xB8\"", "t.toml"), Error);      // cut short
  EXPECT_THROW(toml_ascii("a = \"\xED\xA0\x80\"", "t.toml"), Error);  // a surrogate
  EXPECT_THROW(toml_ascii("a = \"\xC0\xAF\"", "t.toml"), Error);      // overlong
  EXPECT_THROW(toml_ascii("a = \"\\\xC2\xA7\"", "t.toml"), Error);    // an escape is ASCII
}

}  // namespace
}  // namespace furnace
