#!/bin/sh
# Checks that csrc's includes run one way: abi -> passes -> kernels. A file of csrc/kernels
# includes only headers of csrc/kernels; one of csrc/passes, those of passes and kernels; one of
# csrc/abi, those of abi, passes and kernels (csrc/testing and csrc/tools may include any). Quoted
# includes name a header by its file name (CMake puts each layer's folder on the include path of
# that layer and the ones above it): a path with a slash, a header no layer holds, or one of a
# higher layer is reported with the including file and line. Run from the repository root.
set -eu

allowed() {
  case "$1" in
    kernels) echo "kernels" ;;
    passes) echo "passes kernels" ;;
    abi) echo "abi passes kernels" ;;
  esac
}

status=0
for layer in kernels passes abi; do
  for f in $(git ls-files "csrc/$layer/*.cpp" "csrc/$layer/*.h" "csrc/$layer/*.inc"); do
    # "N:NAME" for each quoted include (header names have no spaces)
    # shellcheck disable=SC2013
    for hit in $(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" | sed 's/^\([0-9]*\):[^"]*"\([^"]*\)".*/\1:\2/'); do
      line=${hit%%:*}
      name=${hit#*:}
      case "$name" in
        */*)
          echo "$f:$line: #include \"$name\": name the header by its file name; csrc's layers are include directories" >&2
          status=1
          continue
          ;;
      esac
      found=""
      for l in abi passes kernels; do
        if [ -f "csrc/$l/$name" ]; then found=$l; fi
      done
      if [ -z "$found" ]; then
        echo "$f:$line: #include \"$name\": no such header in csrc/abi, csrc/passes or csrc/kernels" >&2
        status=1
        continue
      fi
      ok=0
      for l in $(allowed "$layer"); do
        if [ "$l" = "$found" ]; then ok=1; fi
      done
      if [ "$ok" = 0 ]; then
        echo "$f:$line: #include \"$name\": csrc/$layer may not include csrc/$found (includes run abi -> passes -> kernels)" >&2
        status=1
      fi
    done
  done
done
exit $status
