// config.json's one codec (model/run_config.h): the trainer writes exactly the
// bytes it wrote when the file was a literal in trainer.cc, FromJson reads
// back what ToJson wrote, files of older runs stay readable, and every key
// says whether it changes results.
#include "model/run_config.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/file.h"
#include "model/trainer.h"
#include "runtime/session.h"
#include "tests/support/temp_dir_test.h"

namespace dgrr::model {
namespace {

// What `dgrr train --out RUN --steps 3 --ranks 2 --batch 4 --lr 0.003 --mode sdc
// --ckpt-every 1 --audit-every 2 --inject bitflip:step=1,rank=0,at=block0.attn.qkv.out
// --inject reduce-order:step=2` wrote into config.json before the codec existed
// (copied from such a run's file), with the numerics version that one fma per
// product term brought (model/numerics.h) added.
constexpr const char* kRecordedConfig = R"({
  "audit_every": 2,
  "batch": 4,
  "ckpt_every": 1,
  "data": {
    "bytes": 262144,
    "path": "",
    "source": "embedded",
    "xxh3": "0xb562f928041128b4"
  },
  "inject": [
    "bitflip:step=1,rank=0,at=block0.attn.qkv.out",
    "reduce-order:step=2"
  ],
  "mode": "sdc",
  "model": {
    "attn_dropout": 0.05000000074505806,
    "dim": 64,
    "heads": 2,
    "layers": 2,
    "preset": "tiny",
    "resid_dropout": 0.05000000074505806,
    "seq": 16
  },
  "numerics": 2,
  "optimizer": {
    "grad_clip": 1.0,
    "lr": 0.003000000026077032,
    "min_lr": 0.0003000000142492354,
    "warmup_steps": 10,
    "weight_decay": 0.009999999776482582
  },
  "ranks": 2,
  "schema": "dgrr.run-config/1",
  "seed": 1,
  "steps": 3,
  "threads": 1
}
)";

class RunConfigTest : public ::dgrr::test_support::TempDirTest {
 protected:
  TrainOptions Recorded(const std::string& name) {
    TrainOptions o;
    o.out_dir = (dir_ / name).string();
    o.steps = 3;
    o.seed = 1;
    o.ranks = 2;
    o.batch = 4;
    o.lr = 0.003f;
    o.mode = RecordMode::kSdc;
    o.ckpt_every = 1;
    o.audit_every = 2;
    for (const char* spec : {"bitflip:step=1,rank=0,at=block0.attn.qkv.out", "reduce-order:step=2"}) {
      auto f = ParseFaultSpec(spec);
      EXPECT_TRUE(f.ok()) << f.status().ToString();
      if (f.ok()) o.faults.push_back(*f);
    }
    return o;
  }

  std::string ConfigText(const std::string& run_dir) {
    auto text = ReadFileToString(ConfigPathFor(run_dir), 1 << 20);
    EXPECT_TRUE(text.ok()) << text.status().ToString();
    return text.ok() ? *text : std::string();
  }
};

TEST_F(RunConfigTest, TrainerWritesTheBytesOfTheFormerLiteral) {
  const TrainOptions o = Recorded("run");
  auto t = Trainer::Create(o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  // The session writes dump(2) of the document it is given.
  EXPECT_EQ((*t)->config().dump(2) + "\n", kRecordedConfig);
  TrainResult r;
  ASSERT_TRUE((*t)->Run(nullptr, &r).ok());
  EXPECT_EQ(ConfigText(o.out_dir), kRecordedConfig);
}

TEST_F(RunConfigTest, ReadsBackWhatItWrites) {
  auto doc = nlohmann::json::parse(kRecordedConfig);
  auto c = RunConfig::FromJson(doc, "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->seed, 1u);
  EXPECT_EQ(c->steps, 3);
  EXPECT_EQ(c->model.preset, "tiny");
  EXPECT_EQ(c->model.layers, 2);
  EXPECT_EQ(c->model.dim, 64);
  EXPECT_EQ(c->model.seq, 16);
  EXPECT_EQ(c->model.attn_dropout, 0.05f);
  EXPECT_EQ(c->data.source, "embedded");
  EXPECT_EQ(c->data.bytes, 262144u);
  ASSERT_TRUE(c->data.xxh3.ok());
  EXPECT_EQ(*c->data.xxh3, "0xb562f928041128b4");
  EXPECT_EQ(c->optimizer.lr, 0.003f);
  EXPECT_EQ(c->optimizer.min_lr, 0.003f * 0.1f);
  EXPECT_EQ(c->optimizer.warmup_steps, 10);
  EXPECT_EQ(c->batch, 4);
  EXPECT_EQ(c->ranks, 2);
  EXPECT_EQ(c->mode, RecordMode::kSdc);
  EXPECT_EQ(c->ckpt_every, 1);
  EXPECT_EQ(c->audit_every, 2);
  ASSERT_EQ(c->inject.size(), 2u);
  EXPECT_EQ(c->inject[1].kind, FaultKind::kReduceOrder);
  EXPECT_EQ(c->ToJson().dump(2) + "\n", kRecordedConfig);
  // And the options a resume continues with are those the run was made with.
  const TrainOptions o = TrainOptionsFromConfig(*c, "RUN");
  const TrainOptions r = Recorded("RUN");
  EXPECT_EQ(o.out_dir, "RUN");
  EXPECT_EQ(o.config_path, ConfigPathFor("RUN"));
  EXPECT_EQ(o.faults_from_config, 2u);
  EXPECT_EQ(o.steps, r.steps);
  EXPECT_EQ(o.batch, r.batch);
  EXPECT_EQ(o.lr, r.lr);
  EXPECT_EQ(o.mode, r.mode);
  EXPECT_EQ(o.audit_every, r.audit_every);
  EXPECT_EQ(o.data_file, "");
}

TEST_F(RunConfigTest, OlderFilesStayReadable) {
  // Before the audit existed, config.json had no audit_every: such runs ran
  // without it.
  auto doc = nlohmann::json::parse(kRecordedConfig);
  doc.erase("audit_every");
  auto c = RunConfig::FromJson(doc, "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->audit_every, 0);
  EXPECT_TRUE(IsRunConfig(doc));
  doc["schema"] = "dgrr.run-config/2";
  EXPECT_FALSE(IsRunConfig(doc));
  EXPECT_TRUE(RunConfig::FromJson(doc, "config.json").status().IsCorruption());
}

// The corpus' description is only checked by a resume: a file without its
// digest is still planned and replayed, and a resume names the key.
TEST_F(RunConfigTest, DataDigestIsReportedByTheResumeThatNeedsIt) {
  TrainOptions o = Recorded("run");
  o.faults.clear();
  {
    auto t = Trainer::Create(o);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    TrainResult r;
    ASSERT_TRUE((*t)->Run(nullptr, &r).ok());
  }
  auto doc = nlohmann::json::parse(ConfigText(o.out_dir));
  doc["data"].erase("xxh3");
  ASSERT_TRUE(WriteFileAtomically(ConfigPathFor(o.out_dir), doc.dump(2) + "\n").ok());
  auto c = ReadRunConfig(o.out_dir);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->data.xxh3.ok());
  TrainOptions resume;
  resume.out_dir = o.out_dir;
  resume.resume = true;
  auto t = Trainer::Create(resume);
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(t.status().IsCorruption()) << t.status().ToString();
  EXPECT_NE(t.status().message().find("key 'data.xxh3': missing"), std::string::npos) << t.status().ToString();

  doc["data"]["xxh3"] = "0x0000000000000000";
  ASSERT_TRUE(WriteFileAtomically(ConfigPathFor(o.out_dir), doc.dump(2) + "\n").ok());
  t = Trainer::Create(resume);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kFailedPrecondition) << t.status().ToString();
  EXPECT_NE(t.status().message().find("changed since the run started"), std::string::npos);
}

// A value the codec refuses is the file's error, naming file and key.
TEST_F(RunConfigTest, RefusesEditedValuesNamingTheKey) {
  auto doc = nlohmann::json::parse(kRecordedConfig);
  doc["optimizer"]["weight_decay"] = 0.5;
  auto c = RunConfig::FromJson(doc, "RUN/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(c.status().IsCorruption());
  EXPECT_NE(c.status().message().find("RUN/config.json: key 'optimizer.weight_decay'"), std::string::npos)
      << c.status().ToString();
  doc = nlohmann::json::parse(kRecordedConfig);
  doc["batch"] = 3;
  c = RunConfig::FromJson(doc, "RUN/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("key 'batch': 3 is not divisible by ranks 2"), std::string::npos)
      << c.status().ToString();
}

// kRunConfigKeys names exactly the keys config.json holds (so a key added to
// the codec must say whether it changes results), and only the rank and
// thread counts, the checkpoint and audit intervals and the device never do
// (a cuda-sim or cuda run equals the cpu run bit for bit; `gemm cublas`
// does not). `device` and `gemm` are written only when they are not the
// default, so the document checked is the codec's own output for a run that
// sets both.
TEST_F(RunConfigTest, EveryKeySaysWhetherItChangesResults) {
  std::set<std::string> written;
  std::vector<std::pair<const nlohmann::json*, std::string>> pending = {{nullptr, ""}};
  StatusOr<RunConfig> recorded = RunConfig::FromJson(nlohmann::json::parse(kRecordedConfig), "config.json");
  ASSERT_TRUE(recorded.ok()) << recorded.status().ToString();
  recorded->device = "cuda-sim";
  recorded->gemm = "cublas";
  const nlohmann::json doc = recorded->ToJson();
  pending.front().first = &doc;
  while (!pending.empty()) {
    auto [value, prefix] = pending.back();
    pending.pop_back();
    if (value->is_object()) {
      for (auto it = value->begin(); it != value->end(); ++it) {
        pending.emplace_back(&it.value(), prefix.empty() ? it.key() : prefix + "." + it.key());
      }
    } else {
      written.insert(prefix);  // an array is one key: inject
    }
  }
  std::set<std::string> table, unchanging;
  for (const RunConfigKey& k : kRunConfigKeys) {
    EXPECT_TRUE(table.insert(k.key).second) << k.key << " listed twice";
    if (!k.changes_results) unchanging.insert(k.key);
    EXPECT_EQ(RunConfigKeyChangesResults(k.key), k.changes_results) << k.key;
  }
  EXPECT_EQ(table, written);
  EXPECT_EQ(unchanging, (std::set<std::string>{"audit_every", "ckpt_every", "device", "ranks", "threads"}));
  EXPECT_TRUE(RunConfigKeyChangesResults("inject[1]"));
  EXPECT_TRUE(RunConfigKeyChangesResults("mode"));
  EXPECT_TRUE(RunConfigKeyChangesResults("a.key.no.run.config.has"));
  EXPECT_FALSE(RunConfigKeyChangesResults("threads"));
}

}  // namespace
}  // namespace dgrr::model
