#pragma once
// The GPU side's contact with the machine (cq/node/gpu.hpp has the
// configuration, the parsers and the logic): node.toml's [gpu] from disk,
// nvidia-smi run without a shell, and the process table read for VRAM
// attribution. node/adapters/gpu.cpp implements them and the GPU probes
// (seams.hpp) over them; the doctor runs its commands with run_command.

#include "cq/node/gpu.hpp"

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace cq::node {

/// Reads the `[gpu]` table of `node_toml` (absent table or file: defaults).
/// Errors name the file, line and key (unknown key, wrong type, empty binary,
/// a lock path that is not absolute; in `[[gpu.lanes]]`: a bad or duplicate
/// name, a negative or duplicate index, a duplicate uuid, a missing or negative
/// vram_bytes, an unknown key, an empty list); errc::invalid_argument.
bus::result<gpu_config> load_gpu_config(const std::filesystem::path& node_toml);

/// What a command printed (stdout and stderr together) and how it ended.
struct command_result {
  int exit_code = -1;     ///< exit status; -1 when it did not exit normally
  bool timed_out = false; ///< killed after the timeout
  std::string output;     ///< at most `max_output` bytes
};

/// Runs `argv` (no shell; argv[0] looked up in the daemon's PATH) with stdin
/// from /dev/null, in its own process group, collecting its output for at most
/// `timeout`, then killing the group. An error only when it cannot be started
/// (errc::not_found for a missing program).
bus::result<command_result> run_command(const std::vector<std::string>& argv,
                                        std::chrono::milliseconds timeout,
                                        std::size_t max_output = 1 << 20);

/// The lanes the device query gives now, or why there are none (a message
/// naming the binary: not found, exit code and first output line, timeout,
/// no devices). On macOS: one unindexed lane gpu0.
bus::result<std::vector<bus::lane_info>> detect_lanes(const std::string& nvidia_smi,
                                                      std::chrono::milliseconds timeout);

/// Which allocation `pid` belongs to (process group of it or an ancestor, else
/// the CQ_ALLOCATION_ID marker of its environment); nullopt for an outside process.
std::optional<std::string> owner_of(pid_t pid, const std::vector<gpu_owner>& owners);

} // namespace cq::node
