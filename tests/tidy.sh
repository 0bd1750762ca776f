#!/usr/bin/env bash
# Fails when a nondeterministic call or a raw contact with the OS appears
# outside an adapter, anywhere in the tree (CONVENTIONS.md: one seam for
# everything nondeterministic; TigerBeetle's tidy.zig is the model).
#
#   tests/tidy.sh [ROOT [FILE...]]
#
# With FILEs (paths under ROOT), only those are checked and the exceptions are
# not checked for staleness (tests/tidy_test.sh's quick mode).
#
# Adapters are where such calls belong. Exceptions are files that still make
# calls of some kinds for a reason written next to them; an exception that no
# longer makes a call of a kind it names is stale and fails the check too, so
# the list only shrinks.
set -u
root=${1:-.}
cd "$root" || exit 2
shift $(($# > 0 ? 1 : 0))

# ---- The calls, by kind (Perl regular expressions) --------------------------
# They are matched against each line with its comments removed and the text of
# its string literals blanked (a literal that starts with '/', a path, stays).
#
# How a C library function's name is reached, written before the name:
#   @free  f( ::f( std::f(, not x.f( p->f( T::f( (a method, a seam's own);
#   @qual  ::f( std::f( only;
#   @call  an unqualified f( where a call goes (after an operator, a bracket,
#          `return`, or first on its line), not after a type: a seam's method
#          named rename declared in a header is fine, a raw rename( is not.
# Names that are also ordinary method names (rename, remove, open, read,
# write, close, time, wait, system...) are caught by @qual and @call only.
free='(?<![\w.>:])(?:std::|::)?'
qual='(?<![\w:])(?:std::|::)'
call='(?:^|(?<=[^\w\s.>:&*~])|(?<=&&)|(?<=[^:]:)|(?<=\breturn))\s*'

kinds="time sleep random process files proc zmq"
spec=() # KIND REGEX pairs
add() { spec+=("$1" "$2"); }

# Reading a clock: any clock's now() (aliases too), the C library's, CAF's.
add time '\b\w*[Cc]lock\w*::now\s*\('
add time '@free(?:clock_gettime|clock_settime|gettimeofday|timespec_get|ftime|getitimer|setitimer|timerfd_\w+)\s*\('
add time '\bmake_timestamp\s*\('
add time '(?:@qual|@call)(?:time|clock)\s*\('
# Sleeping, and timed waits on descriptors.
add sleep '\b(?:usleep|nanosleep|clock_nanosleep|sleep_for|sleep_until)\s*\('
add sleep '@free(?:ppoll|pselect|epoll_wait|epoll_pwait)\s*\('
add sleep '@qual(?:sleep|poll|select)\s*\(|@call(?:sleep)\s*\('
# Randomness: libc, the kernel, libsodium, OpenSSL, the standard library.
add random '@free(?:rand|srand|rand_r|[dejlmn]rand48|srand48|srandom|initstate|arc4random\w*|getrandom|getentropy|randombytes_\w+|RAND_bytes|RAND_priv_bytes)\s*\('
add random '\brandom_(?:device|generator)\b|"/dev/u?random'
add random '(?:@qual|@call)random\s*\('
# Creating, waiting for and signalling processes.
add process '@free(?:fork|vfork|clone3|exec(?:l|lp|le|v|vp|vpe|ve)|fexecve|popen|pclose|posix_spawnp?|posix_spawn_\w+|waitpid|wait3|wait4|waitid|kill|killpg|tgkill|tkill|sigqueue|pidfd_\w+)\s*\('
add process '(?:@qual|@call)(?:system|wait|clone)\s*\(|\bboost::process\b'
# The disk. The C library and POSIX: stdio, descriptors, directories, links,
# locks, syncs; SQLite's and toml++'s openers of a path.
add files '@free(?:fopen|fopen64|freopen|fdopen|tmpfile|tmpnam|tempnam|mkstemps?|mkostemps?|mkdtemp|openat2?|open64|creat|fsync|fdatasync|syncfs|sync_file_range|lstat|fstat|fstatat|statx|statvfs|statfs|fstatfs|faccessat|readlink|readlinkat|realpath|opendir|fdopendir|readdir|scandir|nftw|renameat2?|unlinkat|rmdir|mkdirat|mkfifo|ftruncate|linkat|symlinkat|fchmod|fchmodat|fchown|fchownat|lchown|flock|lockf|fcntl|pread|pread64|pwrite|pwrite64|preadv2?|pwritev2?|lseek|lseek64|mmap|munmap|inotify_\w+|sendfile|copy_file_range|fallocate|posix_fallocate|utimensat|futimens|sqlite3_open(?:_v2)?)\s*\('
add files '\btoml::parse_file\b'
add files '@qual(?:rename|unlink|mkdir|truncate|link|symlink|chmod|chown|stat|access|read|write|close|open|sync)\s*\('
add files '(?<![\w:])::remove\s*\(' # std::remove( is the algorithm
add files '@call(?:rename|remove|unlink|mkdir|truncate|link|symlink|chmod|chown|stat|access)\s*\('
add files '@callopen(?:64)?\s*\([^;]*\bO_[A-Z]+'             # open( with O_ flags
add files '@call(?:read|write|close)\s*\(\s*\w*fd\w*\s*[,)]' # on a descriptor
# C++ streams of any path, std::filesystem's queries and changes.
add files '(?<![\w<])(?:std::)?(?:basic_)?(?:[io]?fstream|filebuf)\b'
add files '(?<!\w)(?:filesystem|fs|stdfs|bfs)::(?:exists|is_directory|is_regular_file|is_symlink|is_empty|is_other|is_fifo|is_socket|is_block_file|is_character_file|file_size|hard_link_count|last_write_time|permissions|status|symlink_status|read_symlink|canonical|weakly_canonical|relative|proximate|current_path|temp_directory_path|space|equivalent|copy|copy_file|copy_symlink|create_directory|create_directories|create_hard_link|create_symlink|create_directory_symlink|remove|remove_all|rename|resize_file|(?:recursive_)?directory_iterator)\b'
add files '\busing\s+namespace\s+(?:std::|boost::)?(?:experimental::)?filesystem\b'
# The host's own files (its telemetry: /proc, /sys, cgroups) opened directly.
add proc '(?:fstream|fopen|open|openat|read_file_bounded)\b[^;]*"/(?:proc|sys)/'
# Raw ZeroMQ.
add zmq '@freezmq_(?:send|recv|socket|ctx_\w+|bind|unbind|connect|disconnect|poll|proxy\w*|setsockopt|getsockopt|close|msg_\w+)\s*\(|\bzmq::'

# re[KIND]: the union of its regexes. loose: every regex of every kind with
# \b for @free, @qual and @call, a quick first look (lookbehinds are slow at
# every position of every line): only the lines it finds are looked at closely.
declare -A re
loose=""
for ((i = 0; i < ${#spec[@]}; i += 2)); do
  k=${spec[i]} r=${spec[i + 1]}
  l=${r//@free/'\b'} l=${l//@qual/'\b'} l=${l//@call/'\b'}
  r=${r//@free/"$free"} r=${r//@qual/"$qual"} r=${r//@call/"$call"} # quoted: & is literal
  re[$k]+="${re[$k]:+|}$r"
  loose+="${loose:+|}$l"
done

# ---- Where they may appear ----------------------------------------------------
# Folders and files whose job is to make these calls.
adapters=(
  bus/src/                # the wire: the gateway's socket thread, the CLI's client
  node/adapters/          # the node's process host, disk and files, host and GPU probes, link
  node/shim.cpp           # cq-shim: forks and execs the workload
  node/shim_standby.cpp   # cq-shim --standby: joins its group, then runs the shim for a job
  node/shim_zygote.cpp    # cq-shim --zygote: forks standbys for cq-node
  cli/src/sys.cpp         # the CLI's processes, clock and /proc
  ground/src/run_command.cpp # the install commands' systemctl and launchctl
  coordinator/adapters/   # the coordinator's board file, written on a thread of its own
)

# Named exceptions: PATH|KINDS|why (KINDS: the kinds above it may make, or *).
# Keep it short.
exceptions=(
  "coordinator/main.cpp|time sleep files|the process's wall-clock epoch, its shutdown wait, its state dir, lock and config files"
  "node/main.cpp|files|cq-node's state dir and its signal eventfd, before any actor runs"
  "node/src/holds.cpp|random|random_hex_id, hold ids for host_probes::random_id and hold_store's default; to move to node/adapters/"
  "coordinator/store/store.cpp|files|opens the SQLite database behind the store actor"
  "coordinator/store/store_files.cpp|files|the store file's identity and its write-ahead log's reserved space, beside SQLite's own I/O"
  "coordinator/auth/auth.cpp|random|ids and tokens from libsodium; actors get them only through context::new_id and new_token"
  "cli/src/|files|the CLI is a one-shot program, not actors: its config, token and key files and cq up's state dir"
  "bench/|*|benchmarks time real programs on the real clock"
  "sim/main.cpp|time|cq-sim reports its wall time per simulated hour"
  "sim/world.cpp|files|the real store's SQLite file, in a temporary directory"
  "sim/workload.cpp|files|reads the --workload trace before the run"
  "tests/|files|tests make temporary directories and files and read the docs they check"
  "tests/tools/load.cpp|time zmq|a load generator with real deadlines"
  "tests/unit/node_gpu_test.cpp|time sleep|deadlines for real processes of the GPU probe"
  "tests/unit/node_platform_test.cpp|sleep process|polls real processes of both platforms' process hosts"
  "tests/unit/spawn_into_cgroup_test.cpp|sleep process proc|finds a cgroup2 mount and reaps the real children it started in a group"
  "tests/unit/local_wire_test.cpp|sleep zmq|waits, with a deadline, for what a real gateway thread writes to its sockets, and plays a ZeroMQ peer"
  "tests/unit/touch_ahead_test.cpp|time sleep|waits, with a deadline, for a joined thread to leave /proc/self/task"
  "tests/unit/heap_pages_test.cpp|process proc|runs itself again as fresh processes (each with its heap placed anew), reaps each, and reads the kernel's THP mode and counts"
  "tests/unit/store_file_test.cpp|time|reads the real clock beside the kernel's file timestamps it compares with"
)

# ---- The scan ------------------------------------------------------------------
# Prints PATH:LINE:KIND:TEXT for each kind of call each line of the files makes.
scanner='
  use strict;
  my @kinds = split " ", $ENV{TIDY_KINDS};
  my %re = map { $_ => qr/$ENV{"TIDY_RE_$_"}/ } @kinds;
  my $loose = qr/$ENV{TIDY_LOOSE}/;
  my ($block, $raw) = (0, undef);
  while (my $line = <>) {
    chomp $line;
    # The code of the line: comments (block ones across lines too) and raw
    # strings dropped, other string literals blanked unless they hold a path.
    my ($s, $code) = ($line, "");
    while (length $s) {
      if ($block) { if ($s =~ s{^.*?\*/}{}) { $block = 0; $code .= " "; next } last }
      if (defined $raw) { if ($s =~ s{^.*?\)\Q$raw\E"}{}) { undef $raw; $code .= q(""); next } last }
      if ($s =~ s{^R"([^(\s"]*)\(}{}) { $raw = $1; next }
      if ($s =~ s{^"((?:[^"\\]|\\.)*)"}{}) { my $t = $1; $code .= $t =~ m{^/} ? qq("$t") : q(""); next }
      if ($code !~ /\w$/ && $s =~ s{^\x27(?:[^\x27\\]|\\.)*\x27}{}) { $code .= "0"; next }
      last if $s =~ m{^//};
      if ($s =~ s{^/\*}{}) { $block = 1; $code .= " "; next }
      $s =~ s{^([^"\x27/R]+|.)}{}; $code .= $1;
    }
    next unless $code =~ $loose;
    for my $k (@kinds) { print "$ARGV:$.:$k:$line\n" if $code =~ $re{$k} }
  } continue {
    if (eof) { close ARGV; $block = 0; undef $raw }
  }'
for k in $kinds; do export "TIDY_RE_$k=${re[$k]}"; done
export TIDY_KINDS=$kinds TIDY_LOOSE=$loose

if (($# > 0)); then
  files=("$@")
else
  mapfile -t files < <(find actors bus coordinator node cli sim bench tests -type f \
    \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' \) 2>/dev/null | LC_ALL=C sort)
fi
hits=""
if ((${#files[@]})) && ! hits=$(perl -e "$scanner" "${files[@]}"); then
  echo "tests/tidy.sh: the scan itself failed (perl, or a regular expression above)"
  echo "0 passed, 1 failed"
  exit 1
fi

# allowed PATH KIND: an adapter, or an exception that names the kind.
allowed() {
  local p=$1 k=$2 a e ks
  for a in "${adapters[@]}"; do [[ $p == "$a"* ]] && return 0; done
  for e in "${exceptions[@]}"; do
    [[ $p == "${e%%|*}"* ]] || continue
    ks=${e#*|}
    ks=" ${ks%%|*} "
    [[ $ks == " * " || $ks == *" $k "* ]] && return 0
  done
  return 1
}

failed=0
bad=""
declare -A used # PATH:KIND of every hit, for the staleness check
while IFS= read -r hit; do
  [[ -z $hit ]] && continue
  path=${hit%%:*}
  rest=${hit#*:}
  line=${rest%%:*}
  rest=${rest#*:}
  kind=${rest%%:*}
  text=${rest#*:}
  used["$path:$kind"]=1
  allowed "$path" "$kind" || bad+="$path:$line: [$kind] ${text#"${text%%[![:space:]]*}"}"$'\n'
done <<<"$hits"
if [[ -n $bad ]]; then
  echo "nondeterministic or OS calls outside the adapters (use a seam, see CONVENTIONS.md):"
  printf '%s' "$bad"
  failed=1
fi

# makes PATH KIND: some file under PATH makes a call of KIND (any kind: *).
makes() {
  local u
  for u in "${!used[@]}"; do
    [[ $u == "$1"* && ($2 == "*" || ${u##*:} == "$2") ]] && return 0
  done
  return 1
}

if (($# == 0)); then
  for e in "${exceptions[@]}"; do
    p=${e%%|*}
    ks=${e#*|}
    read -ra ks <<<"${ks%%|*}"
    for k in "${ks[@]}"; do
      makes "$p" "$k" && continue
      if [[ $k == "*" ]]; then
        echo "stale exception in tests/tidy.sh: $p makes no such call any more; remove its entry"
      else
        echo "stale exception in tests/tidy.sh: $p makes no $k call any more; remove $k from its entry"
      fi
      failed=1
    done
  done
fi

# The node's headers are split (ADR 0026): the actors, their plain code, the
# vocabulary headers and cq-sim see only node/include/cq/node/ (types, pure
# code, the seams); the adapters' headers, which declare the OS calls, are
# the adapters' own and cq-node's startup's.
leaks=""
for f in "${files[@]}"; do
  case $f in
  node/actors/* | node/src/* | node/policy/* | node/include/* | sim/*) ;;
  *) continue ;;
  esac
  l=$(grep -Hn '^[[:space:]]*#[[:space:]]*include[[:space:]]*"node/adapters/' "$f" || true)
  [[ -n $l ]] && leaks+="$l"$'\n'
done
if [[ -n $leaks ]]; then
  echo "node/adapters/ headers included where only the node's vocabulary may be (see ADR 0026):"
  printf '%s' "$leaks"
  failed=1
fi

if ((failed)); then
  echo "0 passed, 1 failed"
  exit 1
fi
echo "1 passed, 0 failed"
