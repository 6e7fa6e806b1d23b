-- Workload for the Lua interpreters of the Debian corpus (corpus/linux/debian.sh).
-- Read from standard input (`lua -`).  Its output must not depend on the run:
-- no time, no addresses, no iteration over hash order (pairs) without sorting.

local fmt = string.format
local N = tonumber(arg and arg[1]) or 1

-- A deterministic generator (Park-Miller), so that no library random is used.
local function lcg(seed)
  local x = seed
  return function(lo, hi)
    x = (x * 16807) % 2147483647
    return lo + x % (hi - lo + 1)
  end
end
local rnd = lcg(20240601)

-- Closures: counters and accumulators sharing upvalues.
local function counter()
  local n = 0
  return function(step) n = n + (step or 1); return n end,
         function() return n end
end
local inc, get = counter()
for i = 1, 100 do inc(i % 7) end
print("counter", get())

local function compose(...)
  local fs = {...}
  return function(x)
    for i = #fs, 1, -1 do x = fs[i](x) end
    return x
  end
end
local f = compose(function(x) return x * 2 end, function(x) return x + 3 end,
                  function(x) return x // 2 end)
local acc = 0
for i = 1, 200 do acc = acc + f(i) end
print("compose", acc)

-- Strings: building, gsub with patterns and functions, find, byte/char, rep.
local words = {"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf",
               "hotel", "india", "juliet", "kilo", "lima", "mike", "november"}
local parts = {}
for i = 1, 300 do parts[#parts + 1] = words[rnd(1, #words)] end
local text = table.concat(parts, " ")
print("text length", #text)
local vowels = select(2, text:gsub("[aeiou]", ""))
print("vowels", vowels)
local caps = text:gsub("(%a)(%a*)", function(a, b) return a:upper() .. b end)
print("caps", caps:sub(1, 60))
local counts = {}
for w in text:gmatch("%a+") do counts[w] = (counts[w] or 0) + 1 end
local keys = {}
for k in pairs(counts) do keys[#keys + 1] = k end
table.sort(keys)
for _, k in ipairs(keys) do io.write(k, "=", counts[k], " ") end
io.write("\n")
local s, e = text:find("delta%s+echo")
print("find", s, e)
local bytes = 0
for i = 1, #text do bytes = (bytes * 31 + text:byte(i)) % 1000000007 end
print("hash", bytes)
print("rep", ("ab"):rep(5, "-"), string.char(76, 117, 97), ("%d items"):format(42))
print("reverse", ("stressed"):reverse(), ("MiXeD"):lower(), #("x"):rep(1000))

-- Tables: records, sorting with a comparator (several keys), insert/remove.
local people = {}
for i = 1, 150 do
  people[i] = {name = words[rnd(1, #words)] .. i, age = rnd(18, 90),
               score = rnd(0, 10000) / 100}
end
table.sort(people, function(a, b)
  if a.age ~= b.age then return a.age > b.age end
  if a.score ~= b.score then return a.score < b.score end
  return a.name < b.name
end)
for i = 1, 5 do
  local p = people[i]
  print(fmt("%-12s %3d %8.2f", p.name, p.age, p.score))
end
local q = {}
for i = 1, 50 do table.insert(q, 1, i) end
for i = 1, 20 do table.remove(q, 3) end
print("queue", #q, q[1], q[#q], table.concat(q, ",", 1, 5))
local moved = table.move({1, 2, 3, 4, 5}, 2, 4, 1, {})
print("move", table.concat(moved, " "), table.unpack({7, 8, 9}))

-- Metatables: a small vector type with operators and __index/__tostring.
local Vec = {}
Vec.__index = Vec
function Vec.new(x, y) return setmetatable({x = x, y = y}, Vec) end
function Vec.__add(a, b) return Vec.new(a.x + b.x, a.y + b.y) end
function Vec.__mul(a, k) return Vec.new(a.x * k, a.y * k) end
function Vec.__eq(a, b) return a.x == b.x and a.y == b.y end
function Vec.__tostring(v) return fmt("(%g, %g)", v.x, v.y) end
function Vec:len2() return self.x * self.x + self.y * self.y end
local v = Vec.new(0, 0)
for i = 1, 100 do v = v + Vec.new(i % 3, i % 5) * 0.5 end
print("vec", tostring(v), v:len2(), v == Vec.new(v.x, v.y))

-- string.format in many shapes.
for i = 1, 6 do
  print(fmt("%5d|%-6s|%08.3f|%x|%q|%e", i * 137, words[i], i / 7, i * 4099,
            words[i + 1], i * 1.5e10))
end

-- pcall / error, with tables as errors, nested, and error levels.
local function risky(n)
  if n % 3 == 0 then error({code = n}) end
  if n % 5 == 0 then error("five:" .. n, 0) end
  return n * n
end
local ok_sum, errs = 0, {}
for i = 1, 30 do
  local ok, r = pcall(risky, i)
  if ok then ok_sum = ok_sum + r
  elseif type(r) == "table" then errs[#errs + 1] = "t" .. r.code
  else errs[#errs + 1] = r end
end
print("pcall", ok_sum, table.concat(errs, " "))
local ok, msg = pcall(function() local t = nil; return t.x end)
print("nil index caught", ok, (msg:gsub("^.-:%d+: ", "")))
print("xpcall", xpcall(function() error("deep") end,
                       function(m) return "handled " .. m:gsub("^.-:%d+: ", "") end))

-- Coroutines: generators, a pipeline and passing values both ways.
local function gen(n)
  return coroutine.wrap(function()
    for i = 1, n do coroutine.yield(i) end
  end)
end
local function filter(pred, g)
  return coroutine.wrap(function()
    for x in g do if pred(x) then coroutine.yield(x) end end
  end)
end
local function map(fn, g)
  return coroutine.wrap(function()
    for x in g do coroutine.yield(fn(x)) end
  end)
end
local total = 0
for x in map(function(x) return x * x end,
             filter(function(x) return x % 3 == 1 end, gen(300))) do
  total = total + x
end
print("pipeline", total)
local co = coroutine.create(function(a, b)
  local c = coroutine.yield(a + b)
  local d, e = coroutine.yield(c * 2)
  return d + e
end)
print("resume", coroutine.resume(co, 1, 2))
print("resume", coroutine.resume(co, 10))
print("resume", coroutine.resume(co, 3, 4))
print("status", coroutine.status(co), coroutine.resume(co))

-- A little interpreter-heavy work: primes, a recursive fib, string building.
local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end
print("fib", fib(16))
local sieve, primes = {}, 0
for i = 2, 4000 do sieve[i] = false end
for i = 2, 4000 do
  if not sieve[i] then
    primes = primes + 1
    for j = i * i, 4000, i do sieve[j] = true end
  end
end
print("primes", primes)
local buf = {}
for i = 1, 500 * N do buf[#buf + 1] = fmt("%04d", (i * 7919) % 10000) end
local joined = table.concat(buf)
print("joined", #joined, joined:sub(1, 24), select(2, joined:gsub("00", "")))
print("utf8", utf8.char(72, 228, 8364, 128512), utf8.len("h\u{e4}\u{20ac}"))
print("math", math.floor(-3.5), math.ceil(3.2), math.max(4, 9, 2), 7 // 2, 7 % -3,
      math.tointeger(8.0), 2 ^ 10, math.abs(-12))
