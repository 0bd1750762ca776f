# Shared by the package tests: the package that build_package.sh made, unpacked
# into a temporary root under the integration tests' $work (so that
# end_test_processes ends whatever runs from it).
here_pkg=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here_pkg/../integration/lib.sh"
pkg_dir=${CQ_PACKAGE_DIR:?CQ_PACKAGE_DIR: the folder build_package.sh wrote}
shopt -s nullglob
debs=("$pkg_dir"/cq_*.deb)
ddebs=("$pkg_dir"/cq-dbgsym_*.ddeb)
shopt -u nullglob
((${#debs[@]} == 1)) || fail "expected one cq_*.deb in $pkg_dir, found ${#debs[@]}"
deb=${debs[0]}
root=$work/root
mkdir -p "$root"
dpkg-deb -x "$deb" "$root"
