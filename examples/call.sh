#!/usr/bin/env bash
# Call a capability served by any Reach agent from a shell: bash, curl and sed, no SDK.
#
#   REACH_HTTP=http://127.0.0.1:8766 examples/call.sh [capability] [params-json]
#
# REACH_HTTP   the coordinator's front door (`reach serve` prints it; default as shown)
# REACH_TOKEN  a bearer token, when the coordinator has tokens (docs/security.md)
# REACH_KEY    the idempotency key of the durable submit (default: one per run)
#
# It makes a synchronous call, submits the same work as a durable task (twice, with one
# Idempotency-Key: the second answer is the first task), polls the task until it ends, and
# exits non-zero unless it succeeded. Errors are application/problem+json: printed as they
# came. docs/http-api.md describes every route.
set -euo pipefail

url="${REACH_HTTP:-http://127.0.0.1:8766}"
capability="${1:-echo.run}"
params="${2:-"{}"}"
key="${REACH_KEY:-call-sh-$$-$RANDOM}"
auth=()
if [[ -n "${REACH_TOKEN:-}" ]]; then
  auth=(-H "Authorization: Bearer ${REACH_TOKEN}")
fi

# request METHOD PATH [BODY] [HEADER...]: prints the body, then a last line with the HTTP
# status and the task's state (the X-Reach-State header of GET /v1/tasks/{id}).
request() {
  local method="$1" path="$2" body="${3:-}"
  shift 3 || shift $#
  local args=(-sS -X "$method" -w '\n%{http_code} %header{x-reach-state}'
              -H 'Content-Type: application/json')
  [[ -n "$body" ]] && args+=(--data-binary "$body")
  curl "${args[@]}" ${auth[@]+"${auth[@]}"} "$@" "${url}${path}"
}

# field NAME JSON: the first string field NAME of a compact JSON object (what Reach sends;
# task_id comes first in every answer that has one).
field() {
  grep -o "\"$1\":\"[^\"]*\"" <<<"$2" | head -n 1 | sed 's/.*:"\(.*\)"/\1/'
}

answer() {  # answer RESPONSE: split into $body, $status and $state
  local last="${1##*$'\n'}"
  body="${1%$'\n'*}"
  status="${last%% *}"
  state="${last#* }"
}

# 1. A synchronous call: the body is the params, the answer is the result.
answer "$(request POST "/v1/call/${capability}?timeout=10" "$params")"
echo "call: ${status} ${body}"
[[ "$status" == 200 ]] || exit 1

# 2. A durable submit: 202 once the task is stored, with its id.
submit="{\"capability\":\"${capability}\",\"params\":${params}}"
answer "$(request POST /v1/tasks "$submit" -H "Idempotency-Key: ${key}")"
[[ "$status" == 202 ]] || { echo "submit: ${status} ${body}"; exit 1; }
task_id="$(field task_id "$body")"
echo "submitted: ${task_id}"

# 3. The same key again: the same task, not a second run.
answer "$(request POST /v1/tasks "$submit" -H "Idempotency-Key: ${key}")"
[[ "$(field task_id "$body")" == "$task_id" ]] || { echo "duplicate ran again"; exit 1; }
echo "duplicate: ${task_id}"

# 4. Poll (each GET waits up to 2 s for the end) until the task is final.
for _ in $(seq 1 15); do
  answer "$(request GET "/v1/tasks/${task_id}?wait=2")"
  [[ "$status" == 200 ]] || { echo "status: ${status} ${body}"; exit 1; }
  case "$state" in
    succeeded) echo "status: succeeded"; echo "task: ${body}"; exit 0 ;;
    failed|dead) echo "status: ${state}"; echo "task: ${body}"; exit 1 ;;
  esac
done
echo "status: still ${state} after polling; ask again: GET ${url}/v1/tasks/${task_id}"
exit 1
