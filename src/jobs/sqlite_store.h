// The SQLite JobStore: pending jobs and history in one database file in WAL mode, so that the
// queue and its history survive kill -9 and a restart (Note [finish atomically] in job_store.h).
#pragma once

#include <memory>
#include <string>

#include "jobs/job_store.h"

namespace hr {

// Opens (creating if needed) the database at `path`. IO naming the file when it cannot be
// opened or its schema cannot be made.
Result<std::unique_ptr<JobStore>> job_store_sqlite(const std::string& path);

}  // namespace hr
