#include "runtime/determinism.h"

#include <gtest/gtest.h>

#include <map>

#include "runtime/environment.h"

namespace dgrr {
namespace {

class FakeEnvironment : public ProcessEnvironment {
 public:
  std::map<std::string, std::string> vars;
  std::map<std::string, std::string> files;
  std::optional<std::string> Get(const std::string& name) const override {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  }
  void Set(const std::string& name, const std::string& value) override {
    vars.emplace(name, value);  // like setenv(..., 0): never overwrites
  }
  std::optional<std::string> ReadTextFile(const std::string& path) const override {
    auto it = files.find(path);
    if (it == files.end()) return std::nullopt;
    return it->second;
  }
};

DeterminismControls ApplyOrDie(FakeEnvironment& env, bool gpu = true, int threads = 2) {
  auto c = DeterminismControls::Apply({.threads = threads, .gpu = gpu}, env);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return *c;
}

TEST(Determinism, SetsDefaultsWhenNothingIsSet) {
  FakeEnvironment env;
  auto c = ApplyOrDie(env);
  EXPECT_EQ(env.vars["NCCL_ALGO"], "Ring");
  EXPECT_EQ(env.vars["NCCL_PROTO"], "Simple");
  EXPECT_EQ(env.vars["NCCL_MIN_NCHANNELS"], env.vars["NCCL_MAX_NCHANNELS"]);
  EXPECT_EQ(env.vars["NCCL_NVLS_ENABLE"], "0");
  EXPECT_EQ(env.vars["NCCL_COLLNET_ENABLE"], "0");
  EXPECT_EQ(env.vars["CUBLAS_WORKSPACE_CONFIG"], ":4096:8");
  EXPECT_EQ(c.Find("NCCL_ALGO")->origin, ControlOrigin::kDgrrDefault);
  EXPECT_EQ(c.Find("dgrr.threads")->value, "2");
  EXPECT_TRUE(c.Warnings().empty());
}

TEST(Determinism, ALaterSessionOfTheProcessRecordsDgrrsOwnValuesAsDefaults) {
  FakeEnvironment env;
  env.vars["NCCL_PROTO"] = "Simple";  // the user's, even though it equals the default
  const auto first = ApplyOrDie(env);
  const auto second = ApplyOrDie(env);
  for (const char* name : {"NCCL_ALGO", "NCCL_MIN_NCHANNELS", "CUBLAS_WORKSPACE_CONFIG"}) {
    EXPECT_EQ(second.Find(name)->origin, ControlOrigin::kDgrrDefault) << name;
    EXPECT_EQ(second.Find(name)->value, first.Find(name)->value) << name;
  }
  EXPECT_EQ(second.Find("NCCL_PROTO")->origin, ControlOrigin::kEnvironment);
  EXPECT_TRUE(second.Warnings().empty());
  // A session wanting another channel count gets the one already in force, and is told.
  auto third = DeterminismControls::Apply({.threads = 1, .gpu = true, .nccl_channels = 8}, env);
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->Find("NCCL_MAX_NCHANNELS")->value, first.Find("NCCL_MAX_NCHANNELS")->value);
  EXPECT_EQ(third->Warnings().size(), 2u);
}

TEST(Determinism, RespectsUserValueAndWarnsWhenItBreaksReproducibility) {
  FakeEnvironment env;
  env.vars["NCCL_ALGO"] = "Tree";
  auto c = ApplyOrDie(env);
  EXPECT_EQ(env.vars["NCCL_ALGO"], "Tree") << "a user's value is never overwritten";
  const ControlSetting* algo = c.Find("NCCL_ALGO");
  EXPECT_EQ(algo->origin, ControlOrigin::kEnvironment);
  ASSERT_EQ(c.Warnings().size(), 1u);
  EXPECT_NE(c.Warnings()[0].find("NCCL_ALGO=Tree"), std::string::npos);
}

TEST(Determinism, AcceptableUserValuesGiveNoWarning) {
  FakeEnvironment env;
  env.vars["NCCL_ALGO"] = "ring";
  env.vars["CUBLAS_WORKSPACE_CONFIG"] = ":16:8";
  auto c = ApplyOrDie(env);
  EXPECT_TRUE(c.Warnings().empty());
  EXPECT_EQ(c.Find("CUBLAS_WORKSPACE_CONFIG")->origin, ControlOrigin::kEnvironment);
}

TEST(Determinism, NcclConfFileValuesAreRecordedWithTheirFile) {
  FakeEnvironment env;
  env.vars["HOME"] = "/home/u";
  env.files["/etc/nccl.conf"] = "# site config\nNCCL_PROTO=LL128\nNCCL_BUFFSIZE = 8388608\n";
  env.files["/home/u/.nccl.conf"] = "NCCL_PROTO=Simple\n";
  auto c = ApplyOrDie(env);
  const ControlSetting* proto = c.Find("NCCL_PROTO");
  EXPECT_EQ(proto->value, "Simple") << "the user's file wins over /etc/nccl.conf";
  EXPECT_EQ(proto->origin, ControlOrigin::kNcclConfFile);
  EXPECT_EQ(proto->source, "/home/u/.nccl.conf");
  EXPECT_EQ(env.vars.count("NCCL_PROTO"), 0u) << "NCCL applies its own file; dgrr must not";
  const ControlSetting* buff = c.Find("NCCL_BUFFSIZE");
  ASSERT_NE(buff, nullptr) << "unpinned settings that change reduction order are still recorded";
  EXPECT_EQ(buff->value, "8388608");
  EXPECT_EQ(buff->source, "/etc/nccl.conf");
}

TEST(Determinism, NcclConfFileVariableReplacesHomeFile) {
  FakeEnvironment env;
  env.vars["HOME"] = "/home/u";
  env.vars["NCCL_CONF_FILE"] = "/opt/nccl.conf";
  env.files["/home/u/.nccl.conf"] = "NCCL_ALGO=Tree\n";
  env.files["/opt/nccl.conf"] = "NCCL_ALGO=NVLS\n";
  auto c = ApplyOrDie(env);
  EXPECT_EQ(c.Find("NCCL_ALGO")->value, "NVLS");
  EXPECT_EQ(c.Warnings().size(), 1u);
}

TEST(Determinism, ChannelBoundsFollowTheOneTheUserSet) {
  FakeEnvironment env;
  env.vars["NCCL_MIN_NCHANNELS"] = "16";
  auto c = ApplyOrDie(env);
  EXPECT_EQ(env.vars["NCCL_MAX_NCHANNELS"], "16");
  EXPECT_TRUE(c.Warnings().empty());

  FakeEnvironment env2;
  env2.vars["NCCL_MIN_NCHANNELS"] = "2";
  env2.vars["NCCL_MAX_NCHANNELS"] = "8";
  auto c2 = ApplyOrDie(env2);
  ASSERT_EQ(c2.Warnings().size(), 1u);
  EXPECT_NE(c2.Warnings()[0].find("NCCL_MAX_NCHANNELS=8"), std::string::npos);
}

TEST(Determinism, CpuOnlyLeavesGpuControlsAlone) {
  FakeEnvironment env;
  auto c = ApplyOrDie(env, /*gpu=*/false);
  EXPECT_TRUE(env.vars.empty());
  EXPECT_EQ(c.Find("NCCL_ALGO")->origin, ControlOrigin::kNotApplicable);
}

TEST(Determinism, RejectsBadOptions) {
  FakeEnvironment env;
  EXPECT_TRUE(DeterminismControls::Apply({.threads = 0}, env).status().IsInvalidArgument());
}

TEST(Determinism, ParsesNcclConfSyntax) {
  auto kv = ParseNcclConf("  # comment\n\nA=1\nB = two words \n=bad\nnoequals\n");
  ASSERT_EQ(kv.size(), 2u);
  EXPECT_EQ(kv[1].first, "B");
  EXPECT_EQ(kv[1].second, "two words");
}

TEST(Environment, DigestIgnoresHostNameAndTimeButNotControls) {
  FakeEnvironment env;
  auto c = ApplyOrDie(env);
  nlohmann::json a = CollectEnvironment(c);
  nlohmann::json b = a;
  b["host"]["hostname"] = "elsewhere";
  b["collected_unix_ns"] = 1;
  EXPECT_EQ(EnvironmentDigest(a), EnvironmentDigest(b));
  b["controls"][1]["value"] = "Tree";
  EXPECT_NE(EnvironmentDigest(a), EnvironmentDigest(b));
  EXPECT_EQ(a["schema"], kEnvironmentSchema);
  EXPECT_FALSE(a["host"]["cpu_model"].get<std::string>().empty());
}

}  // namespace
}  // namespace dgrr
