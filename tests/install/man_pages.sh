#!/bin/sh
# man_pages.sh MANDIR NPUSANCTL NPUSAND NPUSAN_REPLAY - the man pages the
# build made (docs/man) render without a warning, and say what the
# programs' --help says: every command `npusanctl --help` lists has its
# section in npusanctl.1 (".SS npusanctl COMMAND"), every option of
# `npusanctl COMMAND --help` is in that section or in OPTIONS (the options
# of every command), and every option of `npusand --help` and
# `npusan-replay --help` is in its page. Skips (77) without groff or
# without the pages (no go-md2man at build time).
set -eu
mandir=$1
ctl=$2
daemon=$3
replay=$4
pages="npusanctl.1 npusand.1 npusan-replay.1 libnpusan.3"
command -v groff >/dev/null ||
	{ echo "man_pages: SKIP: no groff (Debian's groff-base)" >&2; exit 77; }
[ -f "$mandir/npusanctl.1" ] ||
	{ echo "man_pages: SKIP: no man pages in $mandir (no go-md2man when" \
	       "it was configured)" >&2; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bad=0
fail() { echo "man_pages: FAIL: $*" >&2; bad=1; }

# Rendered as man(1) renders them, every warning on; then as plain text on
# lines too long to wrap, without hyphenation, for the checks below.
for page in $pages; do
	LC_ALL=C.UTF-8 groff -man -Tutf8 -ww -z "$mandir/$page" \
		>"$tmp/warn" 2>&1 || fail "groff failed on $page"
	[ ! -s "$tmp/warn" ] || fail "$page: $(cat "$tmp/warn")"
	groff -man -Tascii -P-cbou -rLL=1000n -rHY=0 "$mandir/$page" \
		>"$tmp/$page.txt" 2>/dev/null
done

# The options (--long and -s) at the start of each line of help text.
options() {
	sed -n 's/^ \{1,\}\(-[a-zA-Z], \)\{0,1\}\(--[a-z][a-z-]*\).*/\1\2/p' |
		tr -d ',' | tr ' ' '\n' | sed '/^$/d'
}
# The lines of a page's section (.SH, at column 0) or subsection (.SS,
# indented 3) whose heading starts with $2, up to the next heading.
section() {
	awk -v head="$2" '
		/^[A-Z]/ || /^   [^ ]/ { on = index($0, head) == 1 ||
					   index($0, "   " head) == 1 }
		on' "$tmp/$1.txt"
}
# Whether option $2 is in the text of file $1, as a word.
has_option() {
	grep -qE -- "(^|[^a-zA-Z0-9-])$2([^a-zA-Z0-9-]|\$)" "$1"
}

section npusanctl.1 OPTIONS >"$tmp/common"
commands=$("$ctl" --help | sed -n '/^Commands:/,/^$/s/^  \([a-z][a-z-]*\) .*/\1/p')
[ -n "$commands" ] || fail "npusanctl --help lists no command"
for cmd in $commands; do
	section npusanctl.1 "npusanctl $cmd " >"$tmp/sec"
	[ -s "$tmp/sec" ] || { fail "npusanctl.1 has no section 'npusanctl $cmd'"; continue; }
	for opt in $("$ctl" "$cmd" --help | options); do
		has_option "$tmp/sec" "$opt" || has_option "$tmp/common" "$opt" ||
			fail "npusanctl.1 does not give npusanctl $cmd $opt"
	done
done
for opt in $("$ctl" --help | options) \
	   $("$ctl" --help | sed -n '1s/^Usage: //p' | grep -o -- '--[a-z][a-z-]*'); do
	has_option "$tmp/common" "$opt" || fail "npusanctl.1 does not give $opt"
done
for prog in "$daemon" "$replay"; do
	name=$(basename "$prog")
	n=0
	for opt in $("$prog" --help | options); do
		n=$((n + 1))
		has_option "$tmp/$name.1.txt" "$opt" ||
			fail "$name.1 does not give $opt"
	done
	[ "$n" -gt 0 ] || fail "$name --help lists no option"
done
[ "$bad" -eq 0 ] || exit 1
echo "man_pages: ok ($(echo "$commands" | wc -w) commands)"
