// Trust (docs/launch-record.md, Security): dgrr replay, rollback and bisect
// start no program from a run directory that is not the user's own unless it
// is trusted explicitly, and never take the variables that name code, or a
// script's interpreter, from a record not trusted explicitly. Through the
// real binary, on runs of the toy program (toy_program.cc).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/coding.h"
#include "runtime/launch_record.h"
#include "tests/replay/reexec_util.h"
#include "tests/support/temp_dir_test.h"

namespace dgrr {
namespace {

using test_support::RecordToyRun;
using test_support::RunProgram;
using test_support::ToyResult;
namespace fs = std::filesystem;

constexpr uid_t kNobody = 65534;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Sets an environment variable for one scope (the dgrr child inherits it).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = ::getenv(name)) old_ = std::string(old);
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

class ReexecTrustTest : public test_support::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    // The trusted list is this test's own (none unless a test writes one).
    config_ = std::make_unique<ScopedEnv>("XDG_CONFIG_HOME", Path("config"));
    run_ = Path("run");
    RecordToyRun(run_);
  }
  void TearDown() override {
    config_.reset();
    TempDirTest::TearDown();
  }
  ToyResult Dgrr(const std::vector<std::string>& args) {
    return RunProgram(args, Path("dgrr.out"), std::string(DGRR_BINARY_DIR) + "/cli/dgrr");
  }
  // Changing ownership needs root (the suite runs as root in CI).
  bool CanChown() const { return ::geteuid() == 0; }
  static void ChownTree(const std::string& dir, uid_t uid) {
    ASSERT_EQ(::chown(dir.c_str(), uid, uid), 0);
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      ASSERT_EQ(::lchown(e.path().c_str(), uid, uid), 0) << e.path();
    }
  }
  void EditLaunch(const std::function<void(nlohmann::ordered_json&)>& edit) {
    std::ifstream in(run_ + "/launch.json");
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(in);
    edit(j);
    std::ofstream(run_ + "/launch.json", std::ios::trunc) << j.dump(2) << "\n";
  }
  void WriteTrustedList(const std::string& text, fs::perms perms = fs::perms::owner_read | fs::perms::owner_write) {
    fs::create_directories(Path("config/dgrr"));
    std::ofstream(Path("config/dgrr/trusted"), std::ios::trunc) << text;
    fs::permissions(Path("config/dgrr/trusted"), perms);
  }
  std::unique_ptr<ScopedEnv> config_;
  std::string run_;
};

TEST_F(ReexecTrustTest, ARunOwnedBySomeoneElseIsRefusedByEveryCommandUnlessTrusted) {
  if (!CanChown()) GTEST_SKIP() << "needs root to give the run to another user";
  ChownTree(run_, kNobody);
  const std::vector<std::vector<std::string>> commands = {
      {"replay", run_, "--checkpoint", "1"},
      {"rollback", run_, "--step", "4", "--quiet"},  // no checkpoint of 4: re-executed from 3
  };
  for (const auto& args : commands) {
    ToyResult r = Dgrr(args);
    EXPECT_EQ(r.rc, 1) << args[0] << ": " << r.output;
    ASSERT_EQ(Lines(r.output).size(), 1u) << r.output;
    EXPECT_EQ(r.output.rfind("dgrr " + args[0] + ": " + run_ + ": not starting its recorded program: the run "
                                 "directory is owned by uid 65534, not by you (uid 0); pass --trust",
                             0),
              0u)
        << r.output;
    EXPECT_TRUE(Contains(r.output, Path("config") + "/dgrr/trusted")) << r.output;
  }
  // Bisect refuses before replaying either run (the good one is ours).
  const std::string good = Path("good");
  RecordToyRun(good, {"--flip", "3"});
  ToyResult r = Dgrr({"bisect", "--good", good, "--bad", run_});
  EXPECT_EQ(r.rc, 1) << r.output;
  ASSERT_EQ(Lines(r.output).size(), 1u) << r.output;
  EXPECT_TRUE(Contains(r.output, "owned by uid 65534")) << r.output;

  // Trusted explicitly, it replays and verifies every record.
  r = Dgrr({"replay", run_, "--checkpoint", "1", "--trust"});
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "dgrr replay: starting the recorded program of " + run_ + " (trusted: --trust):"))
      << r.output;
  EXPECT_TRUE(Contains(r.output, "12 boundaries and 4 step ends match")) << r.output;
}

TEST_F(ReexecTrustTest, ARunDirectoryOrLaunchRecordWritableByOthersIsRefused) {
  fs::permissions(run_, fs::perms::others_write, fs::perm_options::add);
  ToyResult r = Dgrr({"replay", run_, "--checkpoint", "1"});
  EXPECT_EQ(r.rc, 1) << r.output;
  ASSERT_EQ(Lines(r.output).size(), 1u) << r.output;
  EXPECT_TRUE(Contains(r.output, "the run directory is writable by others (mode 0")) << r.output;
  fs::permissions(run_, fs::perms::others_write, fs::perm_options::remove);

  if (CanChown()) {
    // Writable by a group that is not the user's private one (nogroup).
    ASSERT_EQ(::chown(run_.c_str(), 0, kNobody), 0);
    fs::permissions(run_, fs::perms::group_write, fs::perm_options::add);
    r = Dgrr({"replay", run_, "--checkpoint", "1"});
    EXPECT_EQ(r.rc, 1) << r.output;
    EXPECT_TRUE(Contains(r.output, "the run directory is writable by its group (mode 0")) << r.output;
    fs::permissions(run_, fs::perms::group_write, fs::perm_options::remove);
    ASSERT_EQ(::chown(run_.c_str(), 0, 0), 0);
  }

  fs::permissions(run_ + "/launch.json", fs::perms::others_write, fs::perm_options::add);
  r = Dgrr({"replay", run_, "--checkpoint", "1"});
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, run_ + "/launch.json is writable by others (mode 0")) << r.output;
  r = Dgrr({"replay", run_, "--checkpoint", "1", "--trust", "-q"});
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(r.output, "");  // nothing security-relevant differs: -q says nothing
}

TEST_F(ReexecTrustTest, ALaunchRecordLinkedFromSomeoneElsesFileIsRefused) {
  if (!CanChown()) GTEST_SKIP() << "needs root to give a file to another user";
  const std::string foreign = Path("foreign-launch.json");
  fs::rename(run_ + "/launch.json", foreign);
  ASSERT_EQ(::chown(foreign.c_str(), kNobody, kNobody), 0);
  fs::create_symlink(foreign, run_ + "/launch.json");
  ToyResult r = Dgrr({"replay", run_, "--checkpoint", "1"});
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, run_ + "/launch.json (" + foreign + ") is owned by uid 65534")) << r.output;
}

TEST_F(ReexecTrustTest, TheTrustedListTrustsADirectoryAndBelowThroughLinks) {
  if (!CanChown()) GTEST_SKIP() << "needs root to give the run to another user";
  ChownTree(run_, kNobody);
  // Listed by a link to its parent; replayed through another link.
  fs::create_directory_symlink(dir_, Path("parent-link"));
  fs::create_directory_symlink(run_, Path("run-link"));
  WriteTrustedList("# runs from the cluster\n\n" + Path("parent-link") + "\n");
  ToyResult r = Dgrr({"replay", Path("run-link"), "--checkpoint", "1"});
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "(trusted: listed in " + Path("config") + "/dgrr/trusted):")) << r.output;

  // A sibling of the listed directory is not below it.
  WriteTrustedList(Path("ru") + "\n" + Path("run-other") + "\n");
  r = Dgrr({"replay", run_, "--checkpoint", "1"});
  EXPECT_EQ(r.rc, 1) << r.output;

  // A list others can write is not used, and says so.
  WriteTrustedList("*\n", fs::perms::owner_read | fs::perms::owner_write | fs::perms::others_write);
  r = Dgrr({"replay", run_, "--checkpoint", "1"});
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_TRUE(Contains(r.output, "/dgrr/trusted (the trusted runs) is writable by others")) << r.output;
  WriteTrustedList("*\n");
  r = Dgrr({"replay", run_, "--checkpoint", "1", "-q"});
  EXPECT_EQ(r.rc, 0) << r.output;
}

TEST_F(ReexecTrustTest, LoaderVariablesAreTakenFromARecordOnlyWhenTrustedExplicitly) {
  const std::string evil = Path("evil.so");  // does not exist: the loader says so when it is asked to preload it
  EditLaunch([&](nlohmann::ordered_json& j) {
    j["environment"]["LD_PRELOAD"] = evil;
    j["environment"]["PYTHONPATH"] = Path("evil-python");
  });
  const std::string kept = Path("kept");
  ToyResult r = Dgrr({"replay", run_, "--checkpoint", "1", "--keep", kept});
  ASSERT_EQ(r.rc, 0) << r.output;
  std::ifstream log_in(kept + "/program.log");
  const std::string log((std::istreambuf_iterator<char>(log_in)), {});
  EXPECT_FALSE(Contains(log, "evil.so")) << log;
  EXPECT_TRUE(Contains(r.output, "dgrr replay: starting the recorded program of " + run_ + " (owned by you):"))
      << r.output;
  EXPECT_TRUE(Contains(r.output, "dgrr replay:   not taken from the record")) << r.output;
  EXPECT_TRUE(Contains(r.output, "dgrr replay:     LD_PRELOAD=" + evil + " (yours: unset)")) << r.output;
  EXPECT_TRUE(Contains(r.output, "dgrr replay:     PYTHONPATH=" + Path("evil-python"))) << r.output;
  EXPECT_TRUE(Contains(r.output, "12 boundaries and 4 step ends match")) << r.output;
  // Quiet, and nothing that names code reaches the program: nothing said.
  r = Dgrr({"replay", run_, "--checkpoint", "1", "-q"});
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(r.output, "");

  // Trusted explicitly the record is taken as written, and even -q shows it.
  const std::string kept2 = Path("kept2");
  r = Dgrr({"replay", run_, "--checkpoint", "1", "--keep", kept2, "--trust", "-q"});
  std::ifstream log2_in(kept2 + "/program.log");
  const std::string log2((std::istreambuf_iterator<char>(log2_in)), {});
  EXPECT_TRUE(Contains(log2, "evil.so")) << log2;  // ld.so: cannot be preloaded ... ignored
  EXPECT_TRUE(Contains(r.output, "dgrr replay:   environment: yours, with these from the record:")) << r.output;
  EXPECT_TRUE(Contains(r.output, "dgrr replay:     LD_PRELOAD=" + evil + " (yours: unset)")) << r.output;
}

TEST_F(ReexecTrustTest, AScriptsInterpreterComesFromTheCallersPathUnlessTrusted) {
  // A run whose "interpreter" is a copy of the toy program in bin/, with a
  // script beside it: the re-executor must not take bin/toy from the record.
  const std::string bin = Path("bin"), interpreter = Path("bin/toy");
  fs::create_directories(bin);
  fs::copy_file(DGRR_TOY_PROGRAM, interpreter);
  const std::string run = Path("scripted");
  RecordToyRun(run, {}, 6, interpreter);
  const std::string script = Path("train.py");
  std::ofstream(script) << "# the script\n";
  auto digest = FileContentDigest(script);
  ASSERT_TRUE(digest.ok());
  run_ = run;
  EditLaunch([&](nlohmann::ordered_json& j) {
    j["script"] = script;
    j["script_xxh3"] = Hex64(*digest);
  });

  ToyResult r = Dgrr({"replay", run, "--checkpoint", "1"});
  EXPECT_EQ(r.rc, 1) << r.output;
  ASSERT_EQ(Lines(r.output).size(), 1u) << r.output;
  EXPECT_TRUE(Contains(r.output, "its interpreter 'toy' is not on your PATH")) << r.output;

  // Another "toy" first on the caller's PATH: its digest is not the recorded one.
  const std::string other_bin = Path("other-bin");
  fs::create_directories(other_bin);
  fs::copy_file(DGRR_TOY_PROGRAM, other_bin + "/toy");
  std::ofstream(other_bin + "/toy", std::ios::binary | std::ios::app) << '\0';
  {
    ScopedEnv path("PATH", other_bin + ":" + std::string(::getenv("PATH")));
    r = Dgrr({"replay", run, "--checkpoint", "1"});
    EXPECT_EQ(r.rc, 5) << r.output;
    EXPECT_TRUE(Contains(r.output, other_bin + "/toy: the interpreter found on your PATH changed since the recording"))
        << r.output;
  }
  {
    ScopedEnv path("PATH", bin + ":" + std::string(::getenv("PATH")));
    r = Dgrr({"replay", run, "--checkpoint", "1"});
    EXPECT_EQ(r.rc, 0) << r.output;
    EXPECT_TRUE(Contains(r.output, "12 boundaries and 4 step ends match")) << r.output;
  }
  // Trusted explicitly: the recorded interpreter, said even under -q (not the one PATH gives).
  r = Dgrr({"replay", run, "--checkpoint", "1", "--trust", "-q"});
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "dgrr replay:   interpreter: " + interpreter + ", from the record (your PATH gives none)"))
      << r.output;
}

}  // namespace
}  // namespace dgrr
