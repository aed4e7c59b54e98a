// Every scenario key an action lists (actions()) is declared in step_setup.cpp's table and reads
// into that action's own setup type: for each (action, key) pair some TOML value is accepted, and
// none reaches a setup of another action (std::bad_variant_access), which is what a key added to
// an action's list without a field in its setup would do when a lesson names it.
#include <gtest/gtest.h>

#include <toml++/toml.h>

#include <algorithm>
#include <string>
#include <variant>
#include <vector>

#include "furnace/error.h"        // defines: Error
#include "furnace/lesson.h"       // defines: actions, ActionInfo
#include "furnace/stories.h"      // defines: stories
#include "lessons/step_setup.h"   // defines: read_setup
#include "lessons/toml_fields.h"  // defines: Fields

namespace furnace::lesson {
namespace {

// Candidate values of each TOML type; one of them suits every key.
const std::vector<std::string> kCandidates = {
    "1", "2", "0", "true", "0.5", "\"x\"", "\"cuda:0\"", "\"off\"", "\"none\"", "\"constant\"",
    "\"sgd\"", "\"laptop-4060\"", "\"0\"", "[0]", "[1]", "[0, 1]", "[\"1MiB\"]", "{ CUDA_VISIBLE_DEVICES = \"0\" }"};

// What an action needs besides the key under test (FORMAT.md: memory needs alloc, machine a story;
// DataParallel's keys need parallel = "dp", DDP's parallel = "ddp").
std::string companions(const ActionInfo& action, const std::string& key) {
  const auto lists = [&](const char* k) {
    return key != k && std::find(action.keys.begin(), action.keys.end(), k) != action.keys.end();
  };
  std::string out;
  const bool ddp_key = key == "nproc" || key == "bucket_cap_mb" || key == "sampler_set_epoch";
  if (lists("parallel")) out += ddp_key ? "parallel = \"ddp\"\n" : "parallel = \"dp\"\n";
  if (lists("alloc")) out += "alloc = [\"1MiB\"]\n";
  if (lists("story")) out += "story = \"" + stories().front().first + "\"\n";
  return out;
}

TEST(StepKeys, EveryKeyOfEveryActionReadsIntoThatActionsSetup) {
  ASSERT_FALSE(stories().empty());
  for (const ActionInfo& action : actions()) {
    for (const std::string& key : action.keys) {
      bool accepted = false;
      std::string last_error;
      std::vector<std::string> candidates = kCandidates;
      candidates.push_back("\"" + stories().front().first + "\"");
      for (const std::string& value : candidates) {
        const toml::table t = toml::parse(companions(action, key) + key + " = " + value + "\n");
        const detail::Fields f(t, "test.toml", "[step.scenario]");
        try {
          const StepSetup s = detail::read_setup(&f, action);
          EXPECT_NE(std::find(s.keys.begin(), s.keys.end(), key), s.keys.end()) << action.name << " " << key;
          accepted = true;
          break;
        } catch (const std::bad_variant_access&) {
          ADD_FAILURE() << "action '" << action.name << "' lists key '" << key
                        << "', which reads into another action's setup";
          accepted = true;  // reported
          break;
        } catch (const Error& e) {
          last_error = e.what();  // a value of the wrong type or range: try the next
        }
      }
      EXPECT_TRUE(accepted) << "action '" << action.name << "': no value of key '" << key
                            << "' was accepted; the last error: " << last_error;
    }
  }
}

}  // namespace
}  // namespace furnace::lesson
