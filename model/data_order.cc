#include "model/data_order.h"

namespace dgrr::model {

StatusOr<uint64_t> DataOrder::IndexOf(uint64_t g) {
  if (num_examples_ == 0) return Status::InvalidArgument("the dataset has no examples");
  const uint64_t epoch = g / num_examples_;
  if (epoch != epoch_) {
    DGRR_ASSIGN_OR_RETURN(permutation_, rng_.EpochPermutation(epoch, num_examples_));
    epoch_ = epoch;
  }
  return permutation_[g % num_examples_];
}

}  // namespace dgrr::model
