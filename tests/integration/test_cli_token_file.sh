#!/usr/bin/env bash
# The token file: `cq up` writes it 0600 even over a leftover temporary file
# that others could read; `cq` refuses a token file open to group or others
# (naming `chmod 600 FILE`), and refuses a FIFO or a directory at once
# instead of hanging or calling it empty.
source "$(dirname "$0")/lib.sh"

# A crash of an earlier `cq up` could leave token.tmp behind, with any mode.
mkdir -p "$CQ_CONFIG_DIR"
chmod 700 "$CQ_CONFIG_DIR"
touch "$CQ_CONFIG_DIR/token.tmp"
chmod 644 "$CQ_CONFIG_DIR/token.tmp"
start_cq
token=$CQ_CONFIG_DIR/token
[[ $(stat -c %a "$token") == 600 ]] || fail "cq up wrote the token with mode $(stat -c %a "$token")"
cq ls >/dev/null || fail "cq ls fails with the token cq up wrote"
pass "cq up writes the token 0600 even over a leftover 0644 temporary file"

# expect_refusal RC TEXT: `cq ls` exits RC (and does not hang) and its error contains TEXT.
expect_refusal() {
  set +e
  local err rc
  err=$(timeout 30 cq ls 2>&1 >/dev/null)
  rc=$?
  set -e
  [[ $rc -ne 124 ]] || fail "cq ls hung on the token path"
  [[ $rc -eq $1 && $err == *"$2"* ]] || fail "cq ls exited $rc with '$err', not $1 with '$2'"
}

chmod 644 "$token"
expect_refusal 4 "run \`chmod 600 $token\`"
chmod 640 "$token"
expect_refusal 4 "chmod 600 $token"
chmod 600 "$token"
cq ls >/dev/null || fail "cq ls fails after chmod 600"
pass "a token file open to group or others is refused with the fix, and works after it"

mv "$token" "$work/token.saved"
mkfifo "$token"
expect_refusal 4 "$token is a named pipe (FIFO), not a token file"
rm "$token"
mkdir "$token"
expect_refusal 4 "$token is a directory, not a token file"
rmdir "$token"
expect_refusal 4 "no token file at $token"
mv "$work/token.saved" "$token"
pass "a FIFO or a directory at the token path is refused at once and named"
