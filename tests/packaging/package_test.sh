#!/bin/bash
# The Debian package (cmake/Package.cmake) made from this build tree with
# CPack, checked and installed into a scratch root, leaving this machine as
# it was:
#   - its control data (name, version, dependencies found by dpkg-shlibdeps,
#     maintainer scripts, conffiles) and its files (programs in
#     /usr/lib/parallax/bin with links in /usr/bin, libparallax and headers,
#     the Python package and its .pth, both systemd units, both
#     /etc/default files, docs);
#   - `dpkg --root` installs it into the scratch root with its maintainer
#     scripts run chrootless (they honour $DPKG_ROOT: no user is made here),
#     the installed programs run, and purging removes it again;
#   - both units pass `systemd-analyze verify` against that root;
#   - the real dpkg database and user list are unchanged.
#
#   package_test.sh BUILD_DIR
set -euo pipefail
build=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/parallax-package-XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

before_status=$(md5sum /var/lib/dpkg/status)
before_users=$(getent passwd | md5sum)

(cd "$build" && cpack -G DEB -B "$work/out" >"$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; fail "cpack"; }
deb=$(ls "$work"/out/parallax_*.deb)
echo "package: $deb ($(du -h "$deb" | cut -f1))"

# Control data.
[[ $(dpkg-deb -f "$deb" Package) == parallax ]] || fail "package name"
depends=$(dpkg-deb -f "$deb" Depends)
for dep in adduser libzmq5 libthrift libsqlite3; do
  [[ $depends == *"$dep"* ]] || fail "Depends lacks $dep: $depends"
done
dpkg-deb -e "$deb" "$work/control"
for f in postinst postrm conffiles; do [[ -f $work/control/$f ]] || fail "no $f"; done
grep -qx /etc/default/parallax-agent "$work/control/conffiles" || fail "conffiles: $(cat "$work/control/conffiles")"
grep -qx /etc/default/parallax-coordinator "$work/control/conffiles" || fail "conffiles"
sh -n "$work/control/postinst" && sh -n "$work/control/postrm" || fail "maintainer script syntax"

# Files.
dpkg-deb -c "$deb" >"$work/contents"
expect() { grep -qE "$1" "$work/contents" || fail "no $1 in the package"; }
for p in parallax parallax-coordinator parallax-agent parallax-ps parallax-trainer; do
  expect "^-rwxr-xr-x .* \./usr/lib/parallax/bin/$p\$"
done
for p in parallax parallax-coordinator parallax-agent; do
  expect " \./usr/bin/$p -> \.\./lib/parallax/bin/$p\$"
done
expect '\./usr/lib/[^ ]*libparallax\.so'
expect '\./usr/include/parallax/session\.h$'
expect '\./usr/lib/([^ ]*/)?cmake/Parallax/ParallaxConfig\.cmake$'
expect '\./lib/systemd/system/parallax-coordinator\.service$'
expect '\./lib/systemd/system/parallax-agent\.service$'
expect '^-rw-r--r-- .* \./etc/default/parallax-agent$'
expect '^-rw-r--r-- .* \./etc/default/parallax-coordinator$'
expect '\./usr/share/doc/parallax/OPERATIONS\.md$'
if grep -q 'parallax/__init__\.py' "$work/contents"; then
  expect '\./usr/lib/python3/dist-packages/parallax\.pth$'
fi
! grep -qE '\./usr/local|\./home|\./root' "$work/contents" || fail "paths outside the system's"

# Install into a scratch root, maintainer scripts included.
root=$work/root
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/var/log"
touch "$root/var/lib/dpkg/status"
dpkg --root="$root" --log="$root/var/log/dpkg.log" --force-script-chrootless --force-not-root \
  --force-depends -i "$deb" >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; fail "dpkg -i"; }
grep -q '^Status: install ok installed' "$root/var/lib/dpkg/status" || fail "not installed"
for d in var/lib/parallax var/lib/parallax-agent etc/parallax; do
  [[ -d $root/$d ]] || fail "postinst made no /$d"
done
[[ $(stat -c %a "$root/var/lib/parallax") == 750 ]] || fail "/var/lib/parallax mode"
"$root/usr/bin/parallax" --version | grep -q "protocol" || fail "parallax --version"
"$root/usr/bin/parallax-agent" --version | grep -q "parallax-agent" || fail "parallax-agent --version"
"$root/usr/bin/parallax-coordinator" --version | grep -q "parallax-coordinator" || fail "coordinator --version"

# The units, as systemd would load them from that root.
if ! command -v systemd-analyze >/dev/null; then
  echo "SKIPPED CHECK: systemd-analyze is missing (scripts/install-deps --test installs systemd)"
else
  # The scratch root holds no systemd of its own: lend it this machine's
  # units (targets the ours are ordered after), without replacing ours.
  cp -rn /lib/systemd/system/. "$root/lib/systemd/system/"
  for unit in parallax-coordinator parallax-agent; do
    if ! systemd-analyze verify --root="$root" "/lib/systemd/system/$unit.service" \
        >"$work/verify-$unit.log" 2>&1; then
      cat "$work/verify-$unit.log"
      fail "systemd-analyze verify $unit.service"
    fi
    # Warnings about this host's own units are not ours to fix.
    if grep -i "parallax" "$work/verify-$unit.log"; then fail "verify warned about $unit"; fi
    echo "systemd-analyze verify $unit.service: ok"
  done
fi

dpkg --root="$root" --log="$root/var/log/dpkg.log" --force-script-chrootless --force-not-root \
  --purge parallax >"$work/purge.log" 2>&1 || { cat "$work/purge.log"; fail "dpkg --purge"; }
[[ ! -e $root/usr/bin/parallax && ! -d $root/var/lib/parallax ]] || fail "purge left files"

[[ $(md5sum /var/lib/dpkg/status) == "$before_status" ]] || fail "the real dpkg database changed"
[[ $(getent passwd | md5sum) == "$before_users" ]] || fail "the machine's users changed"
echo "package test: ok"
