#pragma once
// A job row as stored since schema 10 (job_record.cpp): the columns queries
// need, and the rest of the job as one record (bus::encode_record of
// job_info). An implementation detail of coordinator/store/.

#include "cq/bus/schema.hpp"

#include <string>
#include <string_view>

namespace cq::coord {

/// The fields of job_info a job row keeps in columns of its own, and so
/// leaves out of its record: the key, the command (written once, never by a
/// job actor, which does not hold it), and what expiry and the serving
/// order query or change (state, finished_ms, priority).
inline constexpr std::string_view job_columns[] = {"id", "argv", "state", "finished_ms",
                                                   "priority"};

/// The record of `j` (without its columns' fields).
std::string encode_job_record(const bus::job_info& j);

/// The job of a record, with the fields of its columns as given. Throws
/// std::runtime_error saying what is wrong with the record or a column.
bus::job_info decode_job_record(std::string_view record, std::string id, std::string_view state,
                                std::int64_t finished_ms, std::string priority);

} // namespace cq::coord
