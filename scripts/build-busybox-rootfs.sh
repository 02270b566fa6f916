#!/bin/sh
# Builds a minimal busybox root filesystem for husk's tests and benchmarks.
#
#   scripts/build-busybox-rootfs.sh DIR [PROBE]
#
# DIR gets /bin/busybox (Debian's busybox-static, or $BUSYBOX), one symlink
# per applet, an /etc with nothing secret (passwd/group without hashes, no
# shadow), the usual empty mount points, and, when PROBE (a static
# husk-probe) is given, /usr/bin/husk-probe. Idempotent: running it again
# refreshes DIR in place and leaves anything else in DIR alone.
set -eu

usage() { echo "usage: $0 DIR [PROBE]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
dir=$1
probe=${2:-}
busybox=${BUSYBOX:-/bin/busybox}

if [ ! -x "$busybox" ]; then
    echo "$0: $busybox not found: apt-get install -y busybox-static" >&2
    exit 1
fi
# A dynamically linked busybox (Debian's 'busybox' package) cannot run in a
# root without a libc: insist on the static one.
if [ -z "${BUSYBOX:-}" ] && command -v dpkg-query >/dev/null 2>&1; then
    owner=$(dpkg-query -S "$busybox" 2>/dev/null | cut -d: -f1 || true)
    if [ "$owner" != "busybox-static" ]; then
        echo "$0: $busybox comes from '${owner:-no package}', not busybox-static: apt-get install -y busybox-static" >&2
        exit 1
    fi
fi
if [ -n "$probe" ] && [ ! -f "$probe" ]; then
    echo "$0: probe $probe not found (build it: cargo build --release -p husk-probe)" >&2
    exit 1
fi

[ -n "$probe" ] && probe=$(readlink -f "$probe")
busybox=$(readlink -f "$busybox")
mkdir -p "$dir"
cd "$dir"
for d in bin sbin usr/bin usr/sbin etc dev proc sys tmp run var/tmp root home workspace; do
    mkdir -p "$d"
done
chmod 1777 tmp var/tmp
chmod 0700 root

# Copy only when changed, so a second run does not touch mtimes.
install_file() { # SRC DST MODE
    if ! cmp -s "$1" "$2" 2>/dev/null; then
        cp "$1" "$2.new.$$"
        chmod "$3" "$2.new.$$"
        mv -f "$2.new.$$" "$2"
    fi
    chmod "$3" "$2"
}

install_file "$busybox" bin/busybox 0755
"$busybox" --list-full | while read -r applet; do
    case $applet in
        */*) ;;
        *) continue ;; # linuxrc and friends
    esac
    [ "$applet" = bin/busybox ] && continue
    target=/bin/busybox
    if [ "$(readlink "$applet" 2>/dev/null || true)" != "$target" ]; then
        ln -sfn "$target" "$applet"
    fi
done

write_etc() { # NAME MODE (content on stdin)
    tmp=$(mktemp "etc/.$1.XXXXXX")
    cat >"$tmp"
    install_file "$tmp" "etc/$1" "$2"
    rm -f "$tmp"
}
write_etc passwd 0644 <<'E'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
E
write_etc group 0644 <<'E'
root:x:0:
nogroup:x:65534:
E
write_etc hostname 0644 <<'E'
husk
E
write_etc hosts 0644 <<'E'
127.0.0.1	localhost
::1	localhost
E
write_etc nsswitch.conf 0644 <<'E'
passwd: files
group: files
hosts: files
E
rm -f etc/shadow etc/gshadow

if [ -n "$probe" ]; then
    install_file "$probe" usr/bin/husk-probe 0755
fi
echo "$dir"
