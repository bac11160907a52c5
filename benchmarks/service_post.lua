-- wrk script of benchmarks/bench_service.py: POST /v1/updates with a unique message id per
-- request (run tag, thread number, per-thread counter) and per-status counts.
--
--   wrk -t2 -c64 -d20s -s benchmarks/service_post.lua URL/v1/updates -- MODE TAG [ENROLLMENT]
--
-- Ids: a random head and a unique tail (run tag, thread number, per-thread counter).
-- MODE: "json" (frecency: 22-float gradient, n = 3, enrollment id of the trained branch)
-- or "binary" (foltr-es: the 12-byte antithetic ES message, ids in X-Message-Id and
-- X-Model-Version). TAG keeps the ids of separate runs apart.
-- MODE "signed-json" or "signed-binary" (bench_service.py --identity): the same messages,
-- signed before the run by enrolled devices (Lua cannot compute their HMAC); ARG3 is a file
-- prefix, and thread i sends the lines of <prefix>.<i> in order: "<X-Fedrank-Device>\t<JSON
-- body>", or "<X-Fedrank-Device>\t<message id>\t<hex body>". A header "-" leaves the
-- request unsigned: requests built before the run for a server without identity, so that
-- wrk does the same work for both servers when their costs are compared. done() prints one line,
-- "FEDRANK_COUNTS <json>", with the requests each thread built (sent) and the statuses it
-- read (a request still in flight when wrk stops is sent but never read).

local threads = {}
local counter = 0

function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end

local mode, tag, enrollment
local prefix, suffix
local signed = {}
-- globals, so that done() can read them with thread:get()
statuses = {}
sent = 0

function init(args)
  mode = args[1] or "json"
  tag = args[2] or "run"
  enrollment = args[3] or "a"
  math.randomseed(id * 7919 + os.time())
  -- 22 fixed gradient entries: parsing and aggregating them is the server's real work.
  local g = {}
  for i = 1, 22 do
    g[i] = string.format("%.6f", math.sin(i) * 0.5)
  end
  prefix = '{"model_version":0,"enrollment_id":"' .. enrollment .. '","payload":{"gradient":['
    .. table.concat(g, ",") .. '],"n":3},"message_id":"'
  suffix = '"}'
  wrk.headers["Content-Type"] = (mode == "binary" or mode == "signed-binary")
    and "application/vnd.fedrank.update" or "application/json"
  wrk.method = "POST"
  if mode == "signed-json" or mode == "signed-binary" then
    for line in io.lines(args[3] .. "." .. id) do
      local a = line:find("\t", 1, true)
      local entry = {header = line:sub(1, a - 1)}
      if mode == "signed-json" then
        entry.body = line:sub(a + 1)
      else
        local b = line:find("\t", a + 1, true)
        entry.mid = line:sub(a + 1, b - 1)
        entry.body = line:sub(b + 1):gsub("..", function(cc)
          return string.char(tonumber(cc, 16))
        end)
      end
      -- built once here, as the unsigned modes' requests cost little to build per call
      local headers = {["Content-Type"] = "application/json"}
      if mode == "signed-binary" then
        headers = {["Content-Type"] = "application/vnd.fedrank.update",
          ["X-Message-Id"] = entry.mid, ["X-Model-Version"] = "0"}
      end
      if entry.header ~= "-" then
        headers["X-Fedrank-Device"] = entry.header
      end
      entry.request = wrk.format(nil, nil, headers, entry.body)
      table.insert(signed, entry.request)
    end
  end
end

local function le32(n)
  return string.char(n % 256, math.floor(n / 256) % 256, math.floor(n / 65536) % 256,
    math.floor(n / 16777216) % 256)
end

local METRICS = string.char(0, 0, 0, 63) .. string.char(0, 0, 128, 62)  -- 0.5f, 0.25f

function request()
  counter = counter + 1
  sent = sent + 1
  if #signed > 0 then
    -- past the last line the requests repeat: duplicates, and the run is not verified
    return signed[(counter - 1) % #signed + 1]
  end
  -- a random head (ids land all over the store's unique index, as random client ids do)
  -- and a unique tail (run tag, thread, counter)
  local mid = string.format("%04x%04x%04x-%s-%d-%d", math.random(0, 65535),
    math.random(0, 65535), math.random(0, 65535), tag, id, counter)
  if mode == "binary" then
    local seed = (id * 1000003 + counter) % 4294967296
    -- wrk.format() uses these headers instead of wrk.headers, so name the type again
    return wrk.format(nil, nil, {["Content-Type"] = "application/vnd.fedrank.update",
      ["X-Message-Id"] = mid, ["X-Model-Version"] = "0"}, le32(seed) .. METRICS)
  end
  return wrk.format(nil, nil, nil, prefix .. mid .. suffix)
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local total_sent = 0
  local merged = {}
  for _, thread in ipairs(threads) do
    total_sent = total_sent + (thread:get("sent") or 0)
    local s = thread:get("statuses") or {}
    for code, n in pairs(s) do
      merged[code] = (merged[code] or 0) + n
    end
  end
  local parts = {}
  for code, n in pairs(merged) do
    table.insert(parts, string.format('"%d": %d', code, n))
  end
  io.write(string.format(
    'FEDRANK_COUNTS {"sent": %d, "statuses": {%s}, "requests": %d, "duration_us": %d, '
      .. '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}, '
      .. '"latency_us": {"mean": %.1f, "p50": %d, "p90": %d, "p99": %d, "max": %d}}\n',
    total_sent, table.concat(parts, ", "), summary.requests, summary.duration,
    summary.errors.connect, summary.errors.read, summary.errors.write, summary.errors.status,
    summary.errors.timeout, latency.mean, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max))
end
