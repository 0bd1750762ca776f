#!/usr/bin/env bash
# The package holds what a machine needs, with the right modes: stripped
# programs that print their version, units that systemd-analyze accepts, the
# maintainer scripts, the docs; its debug symbols come apart; its runtime
# dependencies were computed (dpkg-shlibdeps).
source "$(dirname "$0")/lib.sh"

((${#ddebs[@]} == 1)) || fail "no cq-dbgsym .ddeb beside $deb"
[[ $(dpkg-deb -f "$deb" Package) == cq ]] || fail "package name: $(dpkg-deb -f "$deb" Package)"
version=$(dpkg-deb -f "$deb" Version)
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+-1$ ]] || fail "version: $version"
depends=$(dpkg-deb -f "$deb" Depends)
for lib in libzmq5 libsqlite3-0 libsodium23 adduser; do
  grep -q "$lib" <<<"$depends" || fail "Depends lacks $lib: $depends"
done
pass "cq $version depends on: $depends"

mode() { stat -c %a "$1"; }
for p in cq cq-coordinator cq-node cq-shim; do
  f=$root/usr/bin/$p
  [[ -f $f ]] || fail "no /usr/bin/$p"
  [[ $(mode "$f") == 755 ]] || fail "/usr/bin/$p has mode $(mode "$f")"
  ! readelf -S "$f" | grep -q '\.debug_info' || fail "/usr/bin/$p is not stripped"
done
for p in cq cq-coordinator cq-node; do
  out=$("$root/usr/bin/$p" --version) || fail "$p --version failed"
  [[ $out =~ ^$p\ [0-9]+\.[0-9]+\.[0-9]+\ \(commit\ [0-9a-f]{12}(-modified)?\)$ ]] ||
    fail "$p --version printed: $out"
done
pass "programs stripped, 0755, and say: $out"

# The coordinator's web side (--http, [[notify]]): a module it loads from
# ../lib/cq/, with the HTTP and TLS libraries only it maps.
web=$root/usr/lib/cq/cq-coordinator-web.so
[[ -f $web ]] || fail "no /usr/lib/cq/cq-coordinator-web.so"
! readelf -S "$web" | grep -q '\.debug_info' || fail "cq-coordinator-web.so is not stripped"
[[ $depends == *libcurl* && $depends == *httplib* ]] || fail "the package does not depend on libcurl and cpp-httplib: $depends"
if ldd "$root/usr/bin/cq-coordinator" | grep -qE 'libcurl|httplib|libssl'; then
  fail "cq-coordinator maps the web side's libraries itself"
fi
pass "the web module is in /usr/lib/cq; the coordinator loads it only when asked"
for u in cq-coordinator.service cq-node.service; do
  f=$root/usr/lib/systemd/system/$u
  [[ -f $f && $(mode "$f") == 644 ]] || fail "no $u of mode 644"
done
grep -q '^Delegate=yes' "$root/usr/lib/systemd/system/cq-node.service" || fail "cq-node.service: no Delegate=yes"
grep -q '^KillMode=process' "$root/usr/lib/systemd/system/cq-node.service" ||
  fail "cq-node.service: jobs would not outlive a daemon restart"
grep -q '^Type=notify' "$root/usr/lib/systemd/system/cq-coordinator.service" ||
  fail "cq-coordinator.service: not Type=notify"
for f in share/doc/cq/install.md share/doc/cq/operations.md share/cq/launchd/org.cq.node.plist; do
  [[ -f $root/usr/$f && $(mode "$root/usr/$f") == 644 ]] || fail "no /usr/$f of mode 644"
done
[[ -x $root/usr/share/cq/install-node.sh ]] || fail "no /usr/share/cq/install-node.sh"
control=$work/control
dpkg-deb -e "$deb" "$control"
for s in postinst prerm postrm; do
  [[ -f $control/$s && $(mode "$control/$s") == 755 ]] || fail "no maintainer script $s of mode 755"
  sh -n "$control/$s" || fail "$s does not parse"
done
pass "units, docs, plist and maintainer scripts in place"

# The debug symbols match the stripped programs (by build id).
id=$(readelf -n "$root/usr/bin/cq-coordinator" | awk '/Build ID/ {print $3}')
[[ -n $id ]] || fail "cq-coordinator has no build id"
dpkg-deb -c "${ddebs[0]}" >"$work/dbgsym.list"
grep -q "usr/lib/debug/.build-id/${id:0:2}/${id:2}.debug" "$work/dbgsym.list" ||
  fail "no debug symbols for cq-coordinator (build id $id) in ${ddebs[0]}"
pass "debug symbols apart, by build id"

if ! command -v systemd-analyze >/dev/null; then
  echo "skip: systemd-analyze is not installed (deploy/install-deps.sh installs it)"
  exit 77
fi
# systemd-analyze verify resolves the units' dependencies against the root:
# give it this machine's own units beside ours.
mkdir -p "$root/etc"
cp -an /lib/systemd/system/. "$root/usr/lib/systemd/system/"
verify=$(cd "$root" && systemd-analyze verify --root="$root" cq-coordinator.service cq-node.service 2>&1) ||
  fail "systemd-analyze verify: $verify"
# Any word about our units fails (an unknown key is only a warning); what it
# may say of this machine's own units is not ours to judge.
ours=$(grep -E 'cq-(coordinator|node)\.service' <<<"$verify" || true)
[[ -z $ours ]] || fail "systemd-analyze verify warns: $ours"
pass "systemd-analyze verify accepts both units"
