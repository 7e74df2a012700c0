#include "scanner/containers/api_json.h"

#include <string>

#include "absl/strings/escaping.h"
#include "base/test_util.h"
#include "gtest/gtest.h"

namespace runreaper::scanner::containers {
namespace {

TEST(ApiJsonTest, ParsesValuesWithSpans) {
  const std::string text = R"( {"a": [1, -2.5e3, true, null], "b": {"c": "d\u00e9\ud83d\ude00"}} )";
  ASSERT_OK_AND_ASSIGN(JsonValue v, ParseJson(text));
  ASSERT_EQ(v.type, JsonValue::Type::kObject);
  ASSERT_EQ(v.members.size(), 2u);
  const JsonValue* a = v.Field("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->items.size(), 4u);
  EXPECT_EQ(a->items[1].text, "-2.5e3");
  EXPECT_EQ(text.substr(a->begin, a->end - a->begin), "[1, -2.5e3, true, null]");
  EXPECT_EQ(v.Field("b")->Field("c")->text, "d\xC3\xA9\xF0\x9F\x98\x80");
}

// Malformed input, as a fuzzer would find it: every one refused.
TEST(ApiJsonTest, RefusesMalformedJson) {
  const char* bad[] = {
      "",
      "{",
      "{\"a\":}",
      "{\"a\" 1}",
      "{a:1}",
      "{\"a\":1,}",
      "[1,]",
      "[1 2]",
      "01",
      "1.",
      "-",
      ".5",
      "1e",
      "tru",
      "nul",
      "\"abc",
      "\"a\\x\"",
      "\"\\u12\"",
      "\"\\ud800\"",
      "\"\\udc00\"",
      "\"\\ud800\\u0041\"",
      "\"a\x01\"",
      "\"\xff\"",
      "\"\xc0\xaf\"",
      "{} {}",
      "{}x",
      "'a'",
      "NaN",
  };
  for (const char* b : bad) {
    EXPECT_FALSE(ParseJson(b).ok()) << absl::CEscape(b);
  }
  std::string deep(100, '[');
  deep += std::string(100, ']');
  EXPECT_FALSE(ParseJson(deep).ok());
  std::string ok_depth(60, '[');
  ok_depth += std::string(60, ']');
  EXPECT_TRUE(ParseJson(ok_depth).ok());
}

TEST(ApiJsonTest, GoKeyFoldMatchesGosRules) {
  EXPECT_TRUE(GoKeyFold("Labels", "Labels"));
  EXPECT_TRUE(GoKeyFold("labels", "Labels"));
  EXPECT_TRUE(GoKeyFold("LABELS", "Labels"));
  EXPECT_TRUE(GoKeyFold("label\xC5\xBF", "Labels"));  // long s
  EXPECT_TRUE(GoKeyFold("\xE2\x84\xAA", "k"));        // Kelvin sign
  EXPECT_FALSE(GoKeyFold("Label", "Labels"));
  EXPECT_FALSE(GoKeyFold("Labelsx", "Labels"));
  EXPECT_FALSE(GoKeyFold("Lab\xC3\xA9ls", "Labels"));
}

TEST(ApiJsonTest, StampsIntoExistingLabels) {
  ASSERT_OK_AND_ASSIGN(std::string out,
                       StampLabel(R"({"Image":"x","Labels":{"a":"b"},"Cmd":["true"]})", "Labels",
                                  kClaimLabel, "n1"));
  EXPECT_EQ(out, R"({"Image":"x","Labels":{"io.runreaper.claim":"n1","a":"b"},"Cmd":["true"]})");
  ASSERT_OK_AND_ASSIGN(out, StampLabel(R"({"labels": { } })", "Labels", kClaimLabel, "n\"2"));
  EXPECT_EQ(out, R"({"labels": {"io.runreaper.claim":"n\"2" } })");
  ASSERT_OK_AND_ASSIGN(out,
                       StampLabel(R"({"Labels":null,"Image":"x"})", "Labels", kClaimLabel, "n"));
  EXPECT_EQ(out, R"({"Labels":{"io.runreaper.claim":"n"},"Image":"x"})");
  // The keep label is the one a job may set.
  ASSERT_OK_AND_ASSIGN(
      out, StampLabel(R"({"Labels":{"io.runreaper.keep":"1"}})", "Labels", kClaimLabel, "n"));
  ASSERT_OK_AND_ASSIGN(JsonValue v, ParseJson(out));
  EXPECT_EQ(v.Field("Labels")->members.size(), 2u);
}

TEST(ApiJsonTest, StampsANewLabelsObject) {
  ASSERT_OK_AND_ASSIGN(std::string out, StampLabel(R"({"Image":"x"})", "Labels", kClaimLabel, "n"));
  EXPECT_EQ(out, R"({"Labels":{"io.runreaper.claim":"n"},"Image":"x"})");
  ASSERT_OK_AND_ASSIGN(out, StampLabel(" {} ", "Label", kClaimLabel, "n"));
  EXPECT_EQ(out, R"( {"Label":{"io.runreaper.claim":"n"}} )");
  // A libpod volume body: "Labels" is not its key, "Label" is.
  ASSERT_OK_AND_ASSIGN(out,
                       StampLabel(R"({"Name":"v","Label":{"a":"b"}})", "Label", kClaimLabel, "n"));
  EXPECT_EQ(out, R"({"Name":"v","Label":{"io.runreaper.claim":"n","a":"b"}})");
}

TEST(ApiJsonTest, RefusesForgedAndAmbiguousBodies) {
  const char* bad[] = {
      R"({"Labels":{"io.runreaper.claim":"other-run"}})",
      R"({"Labels":{"io.runreaper\u002eclaim":"x"}})",
      R"({"Labels":{"io.runreaper.anything":"x"}})",
      R"({"Labels":{"a":"b"},"labels":{"c":"d"}})",
      R"({"Labels":{},"LABELS":null})",
      R"({"Labels":{},"label\u017f":{}})",
      R"({"Labels":"a=b"})",
      R"({"Labels":["a"]})",
      R"({"Labels":{"a":1}})",
      R"(["Labels"])",
      R"("x")",
      R"({"Labels":{}} trailing)",
      "",
  };
  for (const char* b : bad) {
    EXPECT_EQ(StampLabel(b, "Labels", kClaimLabel, "n").status().code(),
              absl::StatusCode::kInvalidArgument)
        << b;
  }
  absl::Status dup =
      StampLabel(R"({"Labels":{},"labels":{}})", "Labels", kClaimLabel, "n").status();
  EXPECT_NE(dup.message().find("2 top-level keys"), std::string::npos) << dup;
}

TEST(ApiJsonTest, ParsesCreateAnswers) {
  ASSERT_OK_AND_ASSIGN(CreateAnswer c,
                       ParseCreateAnswer(ObjectKind::kContainer, R"({"Id":"abc","Warnings":[]})"));
  EXPECT_EQ(c.id, "abc");
  ASSERT_OK_AND_ASSIGN(c, ParseCreateAnswer(ObjectKind::kNetwork, R"({"Id":"n1","Warning":""})"));
  EXPECT_EQ(c.id, "n1");
  ASSERT_OK_AND_ASSIGN(
      c, ParseCreateAnswer(ObjectKind::kVolume,
                           R"({"Name":"v","Driver":"local","Labels":{"io.runreaper.claim":"n"}})"));
  EXPECT_EQ(c.id, "v");
  EXPECT_EQ(c.labels.at(kClaimLabel), "n");
  EXPECT_FALSE(ParseCreateAnswer(ObjectKind::kContainer, R"({"Warnings":[]})").ok());
  EXPECT_FALSE(ParseCreateAnswer(ObjectKind::kContainer, R"({"Id":5})").ok());
  EXPECT_FALSE(ParseCreateAnswer(ObjectKind::kVolume, R"({"Name":"v","Labels":[]})").ok());
}

TEST(ApiJsonTest, ParsesInspectAnswers) {
  ASSERT_OK_AND_ASSIGN(ObjectState c, ParseInspect(ObjectKind::kContainer, R"({
    "Id":"abc","Name":"/web",
    "State":{"Status":"running","Running":true,"Paused":false,"Pid":4242,"ConmonPid":4200},
    "Config":{"Labels":{"io.runreaper.claim":"n","x":"y"},"StopSignal":"SIGQUIT"}})"));
  EXPECT_EQ(c.id, "abc");
  EXPECT_EQ(c.name, "web");
  EXPECT_TRUE(c.running);
  EXPECT_EQ(c.pid, 4242);
  EXPECT_EQ(c.conmon_pid, 4200);
  EXPECT_EQ(c.stop_signal, "SIGQUIT");
  EXPECT_EQ(c.labels.size(), 2u);
  ASSERT_OK_AND_ASSIGN(
      c,
      ParseInspect(ObjectKind::kContainer,
                   R"({"Id":"p","State":{"Running":false,"Paused":true,"Pid":0},"Config":null})"));
  EXPECT_TRUE(c.running);
  ASSERT_OK_AND_ASSIGN(ObjectState n, ParseInspect(ObjectKind::kNetwork,
                                                   R"({"Name":"net","Id":"nid","Labels":{},
                                                       "Containers":{"c1":{},"c2":{}}})"));
  EXPECT_EQ(n.id, "nid");
  EXPECT_EQ(n.used_by, (std::vector<std::string>{"c1", "c2"}));
  ASSERT_OK_AND_ASSIGN(ObjectState v,
                       ParseInspect(ObjectKind::kVolume, R"({"Name":"vol","Labels":null})"));
  EXPECT_EQ(v.id, "vol");
  EXPECT_FALSE(ParseInspect(ObjectKind::kContainer, R"({"Id":"a","State":{"Pid":-1}})").ok());
  EXPECT_FALSE(ParseInspect(ObjectKind::kContainer, R"({"Id":"a","State":{"Pid":1e99}})").ok());
  EXPECT_FALSE(ParseInspect(ObjectKind::kContainer, R"({"Id":"a","State":"up"})").ok());
  EXPECT_FALSE(ParseInspect(ObjectKind::kNetwork, R"({"Name":"n"})").ok());
}

TEST(ApiJsonTest, ParsesListsAndErrors) {
  ASSERT_OK_AND_ASSIGN(
      auto ids, ParseList(ObjectKind::kContainer, R"([{"Id":"a"},{"Id":"b","Names":["/x"]}])"));
  EXPECT_EQ(ids, (std::vector<std::string>{"a", "b"}));
  ASSERT_OK_AND_ASSIGN(ids, ParseList(ObjectKind::kVolume, R"({"Volumes":null,"Warnings":null})"));
  EXPECT_TRUE(ids.empty());
  ASSERT_OK_AND_ASSIGN(ids, ParseList(ObjectKind::kVolume, R"({"Volumes":[{"Name":"v1"}]})"));
  EXPECT_EQ(ids, (std::vector<std::string>{"v1"}));
  EXPECT_FALSE(ParseList(ObjectKind::kContainer, R"({"Id":"a"})").ok());
  EXPECT_FALSE(ParseList(ObjectKind::kNetwork, R"([{"Id":""}])").ok());
  EXPECT_EQ(ErrorMessage(R"({"message":"No such container: x"})"), "No such container: x");
  EXPECT_EQ(ErrorMessage("plain\ntext"), "plain\\ntext");
}

// Podman's `{{json .Labels}}` text (scanner/containers/podman_command.cc).
TEST(ParseLabelsTest, FlatObjectsOfStrings) {
  ASSERT_OK_AND_ASSIGN(auto m, ParseLabels(R"({"a":"b","q":"x\"y","u":"\u00e9\ud83d\ude00"})"));
  EXPECT_EQ(m.size(), 3u);
  EXPECT_EQ(m["a"], "b");
  EXPECT_EQ(m["q"], "x\"y");
  EXPECT_EQ(m["u"], "\xc3\xa9\xf0\x9f\x98\x80");
  ASSERT_OK_AND_ASSIGN(auto empty, ParseLabels("null\n"));
  EXPECT_TRUE(empty.empty());
  ASSERT_OK_AND_ASSIGN(auto braces, ParseLabels(" { } "));
  EXPECT_TRUE(braces.empty());
  for (const char* bad : {"[]", R"({"a":1})", R"({"a":"b")", R"({"a":"b"} x)", R"({"a" "b"})",
                          R"({"a":"\q"})", R"({"a":"\u12"})"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ParseLabels(bad).status())) << bad;
  }
}

}  // namespace
}  // namespace runreaper::scanner::containers
