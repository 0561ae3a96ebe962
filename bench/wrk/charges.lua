-- wrk script for POST /charges. BENCH_KEY set: every request uses that key (replays, 409s);
-- unset: every request gets a fresh random UUID key (thread id + counter keep them unique).
-- BENCH_TOKEN set: every request carries "Authorization: Bearer <token>" (AUTH_MODE=jwt).
-- BENCH_BODY set: the JSON body of every request (e.g. with a paymentMethod for the processor
-- mode); unset: {"amountCents":4900}.
-- Every answer's status is counted per thread; done() adds them up and prints one line
-- "BENCHJSON {...}" that bench/api-bench.ts parses (latencies in µs, statuses by code).
local fixed = os.getenv("BENCH_KEY")
local token = os.getenv("BENCH_TOKEN")
local body = os.getenv("BENCH_BODY") or '{"amountCents":4900}'
local counter = 0
local threads = {}
-- Per thread (each thread has a Lua state of its own): status code -> answers.
statuses = {}

function setup(thread)
  -- A global of the thread's state, read by init() and key() there.
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  math.randomseed(os.time() * 1000 + tid * 7919 + math.floor(os.clock() * 1e6))
end

local function key()
  counter = counter + 1
  return string.format("%08x-%04x-4%03x-%04x-%04x%08x",
    math.random(0, 4294967295), math.random(0, 65535), math.random(0, 4095),
    32768 + math.random(0, 16383), tid % 65536, counter)
end

request = function()
  local k = fixed or key()
  local headers = { ["Content-Type"] = "application/json", ["Idempotency-Key"] = k }
  if token then headers["Authorization"] = "Bearer " .. token end
  return wrk.format("POST", "/charges", headers, body)
end

response = function(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local total = {}
  for _, thread in ipairs(threads) do
    for status, n in pairs(thread:get("statuses")) do
      total[status] = (total[status] or 0) + n
    end
  end
  local parts = {}
  for status, n in pairs(total) do
    table.insert(parts, string.format('"%d":%d', status, n))
  end
  local e = summary.errors
  io.write(string.format(
    'BENCHJSON {"requests":%d,"durationUs":%d,"statusErrors":%d,"socketErrors":%d,"timeouts":%d,"p50Us":%d,"p99Us":%d,"maxUs":%d,"statuses":{%s}}\n',
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write, e.timeout,
    latency:percentile(50), latency:percentile(99), latency.max, table.concat(parts, ",")))
end
