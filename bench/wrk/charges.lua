-- wrk script for POST /charges. BENCH_KEY set: every request uses that key (replays, 409s);
-- unset: every request gets a fresh random UUID key (thread id + counter keep them unique).
-- done() prints one line "BENCHJSON {...}" that bench/api-bench.ts parses (latencies in µs).
local fixed = os.getenv("BENCH_KEY")
local body = '{"amountCents":4900}'
local counter = 0
local tid = 0
local threads = {}

function setup(thread)
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
  return wrk.format("POST", "/charges", { ["Content-Type"] = "application/json", ["Idempotency-Key"] = k }, body)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCHJSON {"requests":%d,"durationUs":%d,"statusErrors":%d,"socketErrors":%d,"timeouts":%d,"p50Us":%d,"p99Us":%d,"maxUs":%d}\n',
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write, e.timeout,
    latency:percentile(50), latency:percentile(99), latency.max))
end
