# Sourced: host_python_into ROOT copies the host's python3 into the root
# filesystem ROOT: the interpreter (/usr/bin/python3.X, with python3 -> it),
# the libraries `ldd` names for it and every extension module (their real
# files, at the paths ldd gives, so the loader finds them by the same names,
# the loader among them), and its standard library without test suites,
# idlelib, tkinter, turtledemo, ensurepip, lib2to3, site/dist-packages and
# libpython's static archives (config-3.X-*: for building extensions, a
# third of the stdlib's size, never read by a running interpreter).
# Used by scripts/host-python-image.sh (the docs' python image) and
# scripts/vm-test.sh (the warm scenario's root). Needs /usr/bin/python3.
host_python_into() {
    _root=$1
    _pybin=$(readlink -f /usr/bin/python3 2>/dev/null || true)
    [ -x "$_pybin" ] || { echo "host_python_into: no /usr/bin/python3 (apt-get install python3)" >&2; return 1; }
    _pyname=$(basename "$_pybin")
    mkdir -p "$_root/usr/bin" "$_root/usr/lib"
    cp "$_pybin" "$_root/usr/bin/$_pyname"
    ln -sf "$_pyname" "$_root/usr/bin/python3"
    for _f in "$_pybin" /usr/lib/"$_pyname"/lib-dynload/*.so; do
        ldd "$_f" 2>/dev/null | awk '/=> \// {print $3} /^[[:space:]]*\/lib/ {print $1}'
    done | sort -u | while read -r _lib; do
        mkdir -p "$_root$(dirname "$_lib")"
        cp -L "$_lib" "$_root$_lib"
    done
    tar -C /usr/lib --exclude=test --exclude=tests --exclude=idlelib --exclude=tkinter --exclude=turtledemo \
        --exclude=ensurepip --exclude=lib2to3 --exclude=dist-packages --exclude=site-packages \
        --exclude="config-${_pyname#python}-*" -cf - "$_pyname" | tar -C "$_root/usr/lib" -xf -
}
