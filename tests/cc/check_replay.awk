# SPDX-License-Identifier: GPL-2.0
# Reads mercury-replay's JSON lines (workers and servers of one run) and
# exits 0 only if every byte is accounted for: each worker pushed and pulled
# exactly what the placement says, and the servers together received every
# worker's pushes. usage: awk -v workers=N -f check_replay.awk
BEGIN { FS = "[:,{}]" }
{
	delete k
	for (i = 1; i < NF; i++) { key = $i; gsub(/"/, "", key); k[key] = $(i + 1) }
}
/"role":"worker"/ {
	n++
	if (k["pushed_bytes"] != k["expected_push_bytes"] || k["pulled_bytes"] != k["expected_pull_bytes"]) bad++
	pushed += k["pushed_bytes"]
}
/"role":"server"/ { received += k["received_bytes"] }
END {
	printf "workers=%d mismatched=%d pushed=%d received_by_servers=%d\n", n, bad, pushed, received
	exit !(n == workers && !bad && pushed > 0 && pushed == received)
}
