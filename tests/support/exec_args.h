// The argv a test hands to execv: the program, then its arguments, then a
// null pointer, owned for as long as the child may need them.
#pragma once

#include <string>
#include <vector>

namespace dgrr::test_support {

class ExecArgs {
 public:
  ExecArgs(const std::string& program, const std::vector<std::string>& args) : storage_{program} {
    storage_.insert(storage_.end(), args.begin(), args.end());
    for (std::string& a : storage_) pointers_.push_back(a.data());
    pointers_.push_back(nullptr);
  }
  ExecArgs(const ExecArgs&) = delete;
  ExecArgs& operator=(const ExecArgs&) = delete;

  char* const* argv() { return pointers_.data(); }

 private:
  std::vector<std::string> storage_;
  std::vector<char*> pointers_;  // into storage_, which never grows again
};

}  // namespace dgrr::test_support
