# Input: {"name": "..."} on stdin (validated against inputSchema before the container starts).
name=$(sed -n 's/.*"name"[ ]*:[ ]*"\([^"]*\)".*/\1/p')
[ -n "$name" ] || name=world
printf '{"greeting":"hello, %s","from":"%s","uid":%s}\n' "$name" "$(hostname)" "$(id -u)"
