#!/usr/bin/env bash
# tests/tidy.sh has teeth: on a copy of the tree's sources it passes; it fails
# on each forbidden spelling placed, one at a time, in each of node/actors/,
# coordinator/ and sim/; it lets pass what only looks like one (comments,
# strings, seams' own methods, reopen and is_open); it allows the adapters and
# only the kinds an exception names; it fails on a stale exception; and it
# keeps node/adapters/ headers out of the actors, the vocabulary and cq-sim.
#
#   tests/tidy_test.sh SOURCE_ROOT
#
# The spellings are checked in tidy.sh's quick mode (the scratch files only):
# each spelling alone, in one run for its three folders, so that some hundred
# cases take seconds (a run is mostly process start-up); a few cases run the
# whole tree, as ctest's source_seams does.
set -u
src=${1:?source root}
tidy=$src/tests/tidy.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$src" && find actors bus coordinator node cli sim bench tests -type f \
  \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' \) -print0 | xargs -0 cp --parents -t "$tmp")

passed=0
failed=0
ok() { passed=$((passed + 1)); }
bad() {
  failed=$((failed + 1))
  echo "FAIL: $*"
}

# put PATH LINE: a scratch source file whose function body (line 2) is LINE.
put() {
  [[ -d $tmp/${1%/*} ]] || mkdir -p "$tmp/${1%/*}"
  printf 'void tidy_scratch() {\n  %s\n}\n' "$2" >"$tmp/$1"
}

# passes PATH LINE: tidy passes with LINE in PATH (quick mode).
passes() {
  local out
  put "$1" "$2"
  if out=$("$tidy" "$tmp" "$1"); then ok; else bad "tidy fails with '$2' in $1: $out"; fi
  rm "$tmp/$1"
}

# ---- The clean tree ---------------------------------------------------------
if out=$("$tidy" "$tmp"); then ok; else bad "tidy fails on the tree itself: $out"; fi

# ---- Every spelling, in every kind of actor folder -------------------------
spellings=(
  # time
  'auto t = std::chrono::system_clock::now();'
  'auto t = std::chrono::steady_clock::now();'
  'auto t = std::chrono::high_resolution_clock::now();'
  'using clock = std::chrono::steady_clock; auto t = clock::now();'
  'auto t = std::time(nullptr);'
  'auto t = time(nullptr);'
  'timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);'
  'timeval tv; ::gettimeofday(&tv, nullptr);'
  'auto t = caf::make_timestamp();'
  'auto c = std::clock();'
  # sleep
  'std::this_thread::sleep_for(std::chrono::seconds(1));'
  'std::this_thread::sleep_until(deadline);'
  'usleep(1000);'
  'timespec ts{0, 1000}; ::nanosleep(&ts, nullptr);'
  'sleep(1);'
  '::poll(fds, 1, 100);'
  # randomness
  'int r = rand();'
  'std::srand(42);'
  'std::random_device rd;'
  'long r = random();'
  'double d = drand48();'
  'unsigned char b[8]; ::getrandom(b, sizeof b, 0);'
  'getentropy(b, sizeof b);'
  'randombytes_buf(b, sizeof b);'
  'int fd = ::open("/dev/urandom", O_RDONLY);'
  # processes
  '::fork();'
  'pid_t p = vfork();'
  'execvp(argv[0], argv);'
  '::execve(path, argv, envp);'
  'std::system("ls");'
  'system("ls");'
  'FILE* p = popen("ls", "r");'
  'pclose(p);'
  'posix_spawn(&pid, path, nullptr, nullptr, argv, envp);'
  'posix_spawnp(&pid, "ls", nullptr, nullptr, argv, envp);'
  '::waitpid(pid, &status, 0);'
  'wait(&status);'
  'waitid(P_PID, pid, &info, WEXITED);'
  '::kill(pid, SIGTERM);'
  'killpg(pgid, SIGKILL);'
  'int fd = pidfd_open(pid, 0);'
  # the disk
  'FILE* f = fopen("x", "w");'
  'FILE* f = std::fopen(path.c_str(), "r");'
  'std::ofstream out(path);'
  'std::ifstream in(path);'
  'std::fstream io(path, std::ios::in | std::ios::out);'
  'std::ofstream(path) << text;'
  'int fd = ::open(path.c_str(), O_RDONLY);'
  'int fd = open(path.c_str(), O_WRONLY | O_CREAT, 0644);'
  'int fd = openat(dirfd, "x", O_RDONLY);'
  '::fsync(fd);'
  'fdatasync(fd);'
  '::rename(from.c_str(), to.c_str());'
  'std::rename(from.c_str(), to.c_str());'
  'if (rename(from.c_str(), to.c_str()) != 0) return;'
  'bool ok = ready && rename(from.c_str(), to.c_str()) == 0;'
  'int rc = ready ? rename(from.c_str(), to.c_str()) : -1;'
  'return rename(from.c_str(), to.c_str());'
  '::unlink(path.c_str());'
  '::mkdir(path.c_str(), 0700);'
  '::remove(path.c_str());'
  '::write(fd, buf, n);'
  'auto n = ::read(fd, buf, sizeof buf);'
  'close(fd);'
  '::ftruncate(fd, 0);'
  '::flock(fd, LOCK_EX);'
  'struct stat st; ::stat(path.c_str(), &st);'
  'char d[] = "/tmp/cq-XXXXXX"; mkdtemp(d);'
  'std::filesystem::rename(from, to);'
  'std::filesystem::remove(path);'
  'std::filesystem::remove_all(dir);'
  'std::filesystem::create_directories(dir);'
  'fs::create_directory(dir);'
  'bool e = std::filesystem::exists(path);'
  'for (auto& e : std::filesystem::directory_iterator(dir)) {}'
  'std::filesystem::copy_file(a, b);'
  'using namespace std::filesystem;'
  'auto t = toml::parse_file(path);'
  'sqlite3_open(path.c_str(), &db);'
  # the host's files, raw ZeroMQ
  'std::ifstream in("/proc/meminfo");'
  'zmq_send(s, 0, 0, 0);'
  'zmq::context_t ctx{1};'
)
# Each spelling alone, in all three folders at once (one tidy run per
# spelling: start-up is most of a run's time); each folder's copy must be named.
for s in "${spellings[@]}"; do
  paths=()
  for dir in node/actors coordinator sim; do
    put "$dir/tidy_scratch.cpp" "$s"
    paths+=("$dir/tidy_scratch.cpp")
  done
  out=$("$tidy" "$tmp" "${paths[@]}") && bad "tidy passes with '$s'"
  for p in "${paths[@]}"; do
    if [[ $out == *"$p:2: "* ]]; then ok; else bad "tidy does not name $p for '$s': $out"; fi
  done
done
rm "${paths[@]/#/$tmp/}" # each spelling overwrote the last one's files
# Elsewhere outside the adapters: the actors' headers, the node's policy and
# plain code, the CLI (whose exception covers its own files, not /proc).
elsewhere=(
  'actors/include/cq/tidy_scratch.hpp|std::random_device rd;'
  'node/policy/tidy_scratch.cpp|::killpg(pgid, 9);'
  'node/src/tidy_scratch.cpp|::fsync(fd);'
  'node/include/cq/node/tidy_scratch.hpp|std::ofstream out(path);'
  'coordinator/policy/tidy_scratch.cpp|auto t = std::chrono::system_clock::now();'
  'cli/src/tidy_scratch.cpp|std::ifstream in("/proc/meminfo");'
  'cli/src/tidy_scratch2.cpp|::fork();'
  'bus/include/cq/bus/tidy_scratch.hpp|std::this_thread::sleep_for(std::chrono::seconds(1));'
)
paths=()
for e in "${elsewhere[@]}"; do
  put "${e%%|*}" "${e#*|}"
  paths+=("${e%%|*}")
done
out=$("$tidy" "$tmp" "${paths[@]}") && bad "tidy passes with forbidden calls outside the actor folders"
for e in "${elsewhere[@]}"; do
  if [[ $out == *"${e%%|*}:2: "* ]]; then ok; else bad "tidy does not name ${e%%|*} for '${e#*|}': $out"; fi
done
rm "${paths[@]/#/$tmp/}"

# The whole tree, as ctest runs it: found in a nested folder, in a header, in
# each kind of folder.
put node/actors/tidy_scratch/x.hpp '::fsync(fd);'
put coordinator/api/tidy_scratch.cpp 'auto t = std::chrono::system_clock::now();'
put sim/tidy_scratch.cpp 'std::ofstream out(path);'
out=$("$tidy" "$tmp") && bad "tidy passes on the whole tree with scratch files"
for p in node/actors/tidy_scratch/x.hpp coordinator/api/tidy_scratch.cpp sim/tidy_scratch.cpp; do
  if [[ $out == *"$p:2: "* ]]; then ok; else bad "tidy on the whole tree does not name $p: $out"; fi
done
rm -r "$tmp/node/actors/tidy_scratch" "$tmp/coordinator/api/tidy_scratch.cpp" "$tmp/sim/tidy_scratch.cpp"

# ---- What only looks like one -------------------------------------------------
lookalikes=(
  '// fork(), execvp(), ::fsync(fd) and sleep_for() happen in adapters only'
  '/* std::ofstream out(path); ::rename(a, b); */ int x = 0;'
  'spdlog::warn("cannot rename {}: fsync() and ::open( failed", path);'
  'const char* s = "std::system(\"ls\")";'
  'bool ok = reopen(fd);'
  'if (in.is_open()) return;'
  'auto text = disk.read(file);'
  '(void)disk_of(self).rename(from, to);'
  'disk_->remove(path);'
  'virtual status rename(const std::filesystem::path& from, const std::filesystem::path& to) = 0;'
  'status remove(const fs::path& p) override;'
  'std::optional<std::string> read(const fs::path& file, std::size_t max) override;'
  'node::status sim_disk::rename(const std::filesystem::path& from, const std::filesystem::path& to) {'
  'static fault_mix random(std::mt19937_64& rng);'
  'std::mt19937_64 rng(seed);'
  'auto now = self->clock().now();'
  'self->delayed_send(self, std::chrono::seconds(1), tick_atom::value);'
  'v.erase(std::remove(v.begin(), v.end(), x), v.end());'
  'auto ob = outbox::open(disk, dir);'
  'std::string time_text = format_time(ms);'
  'std::chrono::system_clock::time_point at{};'
  'p->kill_group(pgid); cv.wait(lock); box.remove(seq);'
  'void close() override;'
  'caf::actor_clock& clock() override;'
  'std::int64_t time(std::int64_t at) const;'
  'void wait(int ms);'
  'const char* system_name(); auto t = self->clock().now(); auto s = self->system();'
  'caf::actor_system& sys = self->system();'
  'std::filesystem::path p = dir / "x";'
  'ctx.make_link = cq::coord::zmq_link_factory(wiring);'
  'std::uint64_t n = 1'"'"'000'"'"'000; int fd = 0;'
)
# Each in a file of its own, all in one run: tidy judges each line alone.
paths=()
for ((i = 0; i < ${#lookalikes[@]}; i++)); do
  put "coordinator/tidy_lookalike_$i.cpp" "${lookalikes[i]}"
  paths+=("coordinator/tidy_lookalike_$i.cpp")
done
out=$("$tidy" "$tmp" "${paths[@]}")
for ((i = 0; i < ${#lookalikes[@]}; i++)); do
  p=${paths[i]}
  if [[ $out != *"$p:"* ]]; then ok; else bad "tidy fails on '${lookalikes[i]}': $out"; fi
done
rm "${paths[@]/#/$tmp/}"
put coordinator/tidy_scratch.cpp 'int x = 0;'
printf '/*\n  ::rename(a, b);\n  std::ofstream out(path);\n*/\nauto r = R"sql(\n  SELECT time(1), random();\n)sql";\n' >>"$tmp/coordinator/tidy_scratch.cpp"
if out=$("$tidy" "$tmp" coordinator/tidy_scratch.cpp); then ok; else bad "tidy fails on a block comment or a raw string: $out"; fi
rm "$tmp/coordinator/tidy_scratch.cpp"

# ---- Adapters may; an exception only the kinds it names --------------------
passes node/adapters/tidy_scratch.cpp '::fsync(fd);'
passes coordinator/adapters/tidy_scratch.cpp 'std::ofstream out(path);'
cp "$tmp/sim/world.cpp" "$tmp/world.cpp.orig"
printf 'void tidy_scratch() { ::fsync(3); }\n' >>"$tmp/sim/world.cpp"
if out=$("$tidy" "$tmp" sim/world.cpp); then ok; else bad "a files exception does not allow fsync: $out"; fi
printf 'auto tidy_t = std::chrono::steady_clock::now();\n' >>"$tmp/sim/world.cpp"
if out=$("$tidy" "$tmp" sim/world.cpp); then
  bad "a files exception allows reading the clock"
elif [[ $out == *"sim/world.cpp:"*"[time] auto tidy_t"* ]]; then ok; else bad "the clock in sim/world.cpp not named: $out"; fi
cp "$tmp/world.cpp.orig" "$tmp/sim/world.cpp"

# ---- The adapters' headers stay the adapters' ---------------------------------
# The actors, their plain code, the node's vocabulary headers and cq-sim may
# not include node/adapters/ (where the OS calls are declared); the adapters,
# cq-node's main and the tests may.
for p in node/actors/x.cpp node/src/x.cpp node/include/cq/node/x.hpp sim/x.cpp; do
  printf '#include "node/adapters/linux/procfs.hpp"\n' >"$tmp/$p"
  if out=$("$tidy" "$tmp" "$p"); then
    bad "tidy passes with an adapters' header included in $p"
  elif [[ $out == *"$p:1:"* ]]; then ok; else bad "the include in $p is not named: $out"; fi
  rm "$tmp/$p"
done
for p in node/adapters/x.cpp node/main.cpp tests/unit/x.cpp; do
  [[ -f $tmp/$p ]] && cp "$tmp/$p" "$tmp/x.orig"
  printf '#include "node/adapters/linux/procfs.hpp"\n' >>"$tmp/$p"
  if out=$("$tidy" "$tmp" "$p"); then ok; else bad "tidy fails with an adapters' header in $p: $out"; fi
  if [[ -f $tmp/x.orig ]]; then mv "$tmp/x.orig" "$tmp/$p"; else rm "$tmp/$p"; fi
done

# ---- Stale exceptions ----------------------------------------------------------
# A file that makes no such call any more, then one that makes none of a kind.
cp "$tmp/sim/main.cpp" "$tmp/main.cpp.orig"
printf '// nothing here\n' >"$tmp/sim/main.cpp"
if out=$("$tidy" "$tmp"); then
  bad "tidy passes with a stale exception"
elif [[ $out == *"stale exception in tests/tidy.sh: sim/main.cpp makes no"* ]]; then ok; else bad "stale entry not named: $out"; fi
cp "$tmp/main.cpp.orig" "$tmp/sim/main.cpp"
cp "$tmp/tests/tools/load.cpp" "$tmp/load.cpp.orig"
printf 'void f() { zmq::context_t c; }\n' >"$tmp/tests/tools/load.cpp"
if out=$("$tidy" "$tmp"); then
  bad "tidy passes with an exception naming a kind no longer made"
elif [[ $out == *"stale exception in tests/tidy.sh: tests/tools/load.cpp makes no time call"* ]]; then ok; else bad "stale kind not named: $out"; fi
cp "$tmp/load.cpp.orig" "$tmp/tests/tools/load.cpp"

echo "$passed passed, $failed failed"
((failed == 0))
