#ifndef PS_SCHEDULER_RESTORE_OPTIONS_H_
#define PS_SCHEDULER_RESTORE_OPTIONS_H_

// What a scheduler restored with --restore keeps of the job it takes back:
// the settings a state file records (JobState's node counts and JobConfig),
// compared with and taken into its SchedulerOptions.
//
// The settings, by their ps_scheduler flag: num_servers, num_workers,
// replicas, elastic, heartbeat_timeout, server_timeout, register_timeout.
// The consistency and the placement rules are the model's, which the state
// file holds whole. Free functions with no state: thread-safe.

#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/wire/messages.h"
#include "scheduler/scheduler.h"

namespace ps {

// The flags of the settings a restore keeps, in the order above.
const std::vector<std::string>& RestoredFlags();

// The configuration `options` give a job, as its state file records it.
JobConfig JobConfigOf(const SchedulerOptions& options);

// OK when `options` run the job `state` (read from `options.state_file`)
// describes: the same node counts and, where the file records it, the same
// configuration. kInvalidArgument naming the first flag that differs, its
// value and the job's.
absl::Status CheckSameJob(const SchedulerOptions& options, const JobState& state);

// ps_scheduler --restore: `options` with every setting the command line did
// not give (`given`: flag names without dashes) taken from the state file,
// then checked as CheckSameJob does, so that a flag that contradicts the
// job is refused by name and one that agrees is accepted. A state file of
// format 1 records the node counts only: the rest stays as given. Errors of
// ReadJobState (kNotFound, kDataLoss naming the file), then CheckSameJob's.
absl::StatusOr<SchedulerOptions> OptionsForRestore(SchedulerOptions options,
                                                   const absl::flat_hash_set<std::string>& given);

}  // namespace ps

#endif  // PS_SCHEDULER_RESTORE_OPTIONS_H_
