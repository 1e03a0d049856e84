#!/usr/bin/env bash
# test_completion.sh - drives client/trainctl.bash's completion function
# in bash, as a shell would on <TAB>: commands, options of pack,
# bench-input and plot, --augment op names, job ids, options before the command,
# queue --state's job states (taken from trainctl queue --help), queue's
# and rm's selectors, rm --state's ended states, config's keys (every one
# traind --help-config lists), export's formats.
# Runs twice: with plain bash and with the bash-completion package's
# helpers loaded (when installed).
set -u
src=${TD_SOURCE_ROOT:-.}/client/trainctl.bash
fail=0

run() { # run MODE: prints one line per check, "ok" or what went wrong
    bash --norc --noprofile -s "$1" "$src" <<'INNER'
mode=$1 src=$2
if [[ $mode == full ]]; then
    source /usr/share/bash-completion/bash_completion || exit 3
fi
source "$src"
# A stand-in daemon: trainctl queue --json lists jobs 3 and 12, and says
# which socket it was asked on.
trainctl() {
    [[ $1 == --socket ]] && { echo "$2" >"$TMPDIR_/socket"; shift 2; }
    [[ $1 == queue && $2 == --json ]] &&
        echo '{"jobs":[{"id":3,"name":"a","state":"running"},{"id":12,"name":"b"}]}'
    [[ $1 == queue && $2 == --help ]] && # the real one's list of states
        "${TD_BUILD_ROOT:-build}/client/trainctl" queue --help
}
TMPDIR_=$(mktemp -d)
complete_line() { # the words of a line, the last one being completed
    COMP_WORDS=("$@")
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    COMP_LINE="$*"
    COMP_POINT=${#COMP_LINE}
    COMPREPLY=()
    _trainctl trainctl "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
    echo "${COMPREPLY[*]}"
}
expect() { # expect WANT-WORD... -- LINE...
    local want=() line=()
    while [[ $1 != -- ]]; do want+=("$1"); shift; done
    shift
    local got; got=" $(complete_line "$@") "
    for w in "${want[@]}"; do
        if [[ $got != *" $w "* ]]; then
            echo "FAIL [$mode] '$*': no '$w' in:$got"
            return
        fi
    done
    echo ok
}
expect pack bench-input -- trainctl ""
expect --index --threads --val-fraction -- trainctl pack --
expect --prefetch --seed --layout --eval -- trainctl bench-input --
expect pad_crop -- trainctl bench-input --augment pa
expect flip,pad_crop -- trainctl bench-input --augment flip,pa
expect 3 12 -- trainctl watch ""
expect 12 -- trainctl logs 1
expect --output --size -- trainctl plot --
expect --daemon --device -- trainctl eval --
expect --daemon --device --top -- trainctl predict --
expect cpu cuda:0 -- trainctl predict c.st --daemon --device ""
expect 3 12 -- trainctl plot ""
expect 3 12 -- trainctl --socket /tmp/x.sock cancel ""
[[ $(cat "$TMPDIR_/socket") == /tmp/x.sock ]] && echo ok ||
    echo "FAIL [$mode] job ids not asked on --socket's daemon"
expect queue -- trainctl --socket /tmp/x.sock qu
expect get set -- trainctl --json config ""
expect suspended failed -- trainctl queue --state ""
expect --last --mine --active --all -- trainctl ls --
expect --state --ended-before --mine --dry-run -- trainctl rm --
expect completed failed cancelled -- trainctl rm --state ""
# every setting traind has (it completed 12 of 20), pack's --seed, export's
# formats (completion named only some of them)
keys=$("${TD_BUILD_ROOT:-build}/daemon/traind" --help-config |
    awk '/^  [a-z_]+ +default /{print $1}')
[[ -n $keys ]] || echo "FAIL [$mode] traind --help-config listed no keys"
expect $keys -- trainctl config set ""
expect --seed -- trainctl pack --
expect safetensors onnx -- trainctl export m.st --format ""
rm -rf "$TMPDIR_"
INNER
}

modes=(plain)
if [[ -r /usr/share/bash-completion/bash_completion ]]; then
    modes+=(full)
else
    echo "note: bash-completion not installed; plain bash only"
fi
for m in "${modes[@]}"; do
    out=$(run "$m")
    echo "$out"
    n=$(grep -c '^ok$' <<<"$out")
    grep -q FAIL <<<"$out" && fail=1
    ((n == 23)) || { echo "[$m] only $n of 23 checks ran"; fail=1; }
done
exit $fail
