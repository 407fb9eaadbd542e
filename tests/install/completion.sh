#!/bin/sh
# completion.sh COMPLETION NPUSANCTL - tools/completion/npusanctl, sourced
# in bash, completes `npusanctl ` to the commands `npusanctl --help`
# lists, `npusanctl findings --` to the options `npusanctl findings --help`
# lists, an option after global ones (`npusanctl --socket S findings
# --ki`), a --kind value, and the command after `run --`. Skips (77)
# without bash.
set -eu
completion=$1
ctl=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
command -v bash >/dev/null ||
	{ echo "completion: SKIP: no bash" >&2; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/bin"
ln -s "$ctl" "$tmp/bin/npusanctl"
bad=0

# What completing the words $2... (the last the one completed) offers,
# sorted, one a line, into file $1.
complete_words() {
	out=$1
	shift
	PATH="$tmp/bin:$PATH" bash -c '
		. "$0"
		COMP_WORDS=("$@")
		COMP_CWORD=$(($# - 1))
		COMP_LINE="$*"
		COMP_POINT=${#COMP_LINE}
		_npusanctl
		printf "%s\n" "${COMPREPLY[@]}"' "$completion" "$@" |
		sed '/^$/d' | sort >"$out"
}
expect() {
	if ! cmp -s "$1" "$2"; then
		echo "completion: FAIL: $3: offered" >&2
		diff "$1" "$2" >&2 || true
		bad=1
	fi
}

"$ctl" --help | sed -n '/^Commands:/,/^$/s/^  \([a-z][a-z-]*\) .*/\1/p' |
	sort >"$tmp/want"
[ -s "$tmp/want" ] || { echo "completion: FAIL: no commands in --help" >&2; exit 1; }
complete_words "$tmp/got" npusanctl ""
expect "$tmp/got" "$tmp/want" "npusanctl <TAB>"

"$ctl" findings --help | grep -o -- '--[a-z][a-z-]*' | sort -u >"$tmp/all"
complete_words "$tmp/got" npusanctl findings --
for opt in --job --pid --rank --kind --since --limit --json --follow \
	   --suppressions --socket --timeout --help; do
	grep -qx -- "$opt" "$tmp/got" || {
		echo "completion: FAIL: npusanctl findings --<TAB> lacks $opt" >&2
		bad=1
	}
done
# Nothing but the options findings --help gives.
comm -23 "$tmp/got" "$tmp/all" >"$tmp/extra"
[ ! -s "$tmp/extra" ] || {
	echo "completion: FAIL: npusanctl findings --<TAB> offers $(cat "$tmp/extra")" >&2
	bad=1
}

printf '%s\n' --kind >"$tmp/want"
complete_words "$tmp/got" npusanctl --socket /tmp/s findings --ki
expect "$tmp/got" "$tmp/want" "npusanctl --socket S findings --ki<TAB>"

printf '%s\n' data_race missing_record_stream >"$tmp/want"
complete_words "$tmp/got" npusanctl findings --kind ""
expect "$tmp/got" "$tmp/want" "npusanctl findings --kind <TAB>"

printf '%s\n' --gen-suppressions >"$tmp/want"
complete_words "$tmp/got" npusanctl analyze --gen
expect "$tmp/got" "$tmp/want" "npusanctl analyze --gen<TAB>"

complete_words "$tmp/got" npusanctl run --job j -- npusan
grep -qx npusanctl "$tmp/got" || {
	echo "completion: FAIL: npusanctl run -- npusan<TAB> lacks npusanctl" >&2
	bad=1
}
[ "$bad" -eq 0 ] || exit 1
echo "completion: ok"
