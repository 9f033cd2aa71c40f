// Fast-forwarding the data pipeline on resume: the cost of positioning the
// tiny model's data order at step s and producing its batch, for s = 10 and
// s = 100000. dgrr computes it directly (one epoch permutation), so the cost
// is flat in s; the baseline replays the order from step 0, as a stateful
// data loader must, and grows linearly.
#include <benchmark/benchmark.h>

#include "model/config.h"
#include "model/corpus.h"
#include "model/data_order.h"

namespace {

using dgrr::model::DataOrder;
using dgrr::model::Dataset;

struct Tiny {
  Tiny() : preset(*dgrr::model::PresetByName("tiny")), data(*Dataset::Arithmetic(1, preset.model.seq_len)) {}
  dgrr::model::Preset preset;
  Dataset data;
};

void BM_PositionDirectly(benchmark::State& state) {
  static Tiny tiny;
  const uint64_t step = static_cast<uint64_t>(state.range(0));
  const uint64_t batch = static_cast<uint64_t>(tiny.preset.train.batch_size);
  const dgrr::rng::RngStreams rng(1);
  for (auto _ : state) {
    DataOrder order(rng, tiny.data.num_examples());  // a fresh process resuming at `step`
    uint64_t sum = 0;
    for (uint64_t i = 0; i < batch; ++i) sum += tiny.data.Example(*order.IndexOf(step * batch + i))[0];
    benchmark::DoNotOptimize(sum);
  }
  state.counters["examples_per_epoch"] = static_cast<double>(tiny.data.num_examples());
}
BENCHMARK(BM_PositionDirectly)->Arg(10)->Arg(100000)->Unit(benchmark::kMicrosecond);

void BM_PositionByReplay(benchmark::State& state) {
  static Tiny tiny;
  const uint64_t step = static_cast<uint64_t>(state.range(0));
  const uint64_t batch = static_cast<uint64_t>(tiny.preset.train.batch_size);
  const dgrr::rng::RngStreams rng(1);
  for (auto _ : state) {
    DataOrder order(rng, tiny.data.num_examples());
    uint64_t sum = 0;
    for (uint64_t g = 0; g < (step + 1) * batch; ++g) sum += *order.IndexOf(g);  // every earlier batch
    benchmark::DoNotOptimize(sum);
  }
}
BENCHMARK(BM_PositionByReplay)->Arg(10)->Arg(100000)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
