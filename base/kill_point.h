// TEST HOOK. Named points where a process may SIGKILL itself, so that tests
// interrupt a command on progress instead of on the clock
// (tests/train/kill_resume_test.cc).
//
// Inert unless the environment variable DGRR_TEST_KILL_AT is set, to
// "STAGE:N" or "STAGE:N:RANK"; then the process raises SIGKILL the first time
// it reaches KillPoint(STAGE, N, rank) with a matching rank (any rank when
// RANK is left out). The variable is read once. With DGRR_TEST_KILL_SIGNAL
// set to INT or TERM, the process raises that signal instead, once (not once
// per rank), so that tests drive a graceful stop at a named point. The stages:
//   step            trainer: after step N's records (STEP end) on a rank
//   ckpt-temp       Session::Checkpoint (the HDF5 store): a rank's shard of
//                   step N written to its temporary file, before the rename
//   ckpt-shard      Session::Checkpoint: the rank's shard of step N
//                   durable, before the ranks' barrier and rank 0's manifest
//   ckpt-commit     Session::Checkpoint: the manifest of step N renamed into
//                   place (rank 0)
//   resume-cut      RunDirectory::CutTrace (train --resume, Session::Resume):
//                   rank N's trace cut back to the checkpoint
//   rollback-begun  rollback: its marker written (N: the step rolled back to)
//   rollback-ckpt   rollback: stage 2 done (N: the step rolled back to)
//   rollback-cut    rollback: rank N's trace cut, its EVENT not yet appended
//   rollback-event  rollback: rank N's trace cut and its EVENT appended
//   rollback-remove rollback: the later checkpoint of step N removed
#pragma once

#include <cstdint>
#include <string_view>

namespace dgrr {

void KillPoint(std::string_view stage, int64_t n, int rank = -1);

}  // namespace dgrr
