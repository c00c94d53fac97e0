--[[ wake_take: take the wake-up tokens of up to n lists at once (a worker of many queues)
A worker serving many queues on one Redis (worker/fetcher.py) learns which queues have work from
their wake lists' tokens. BLPOP and LMPOP take one token a call, and each call names every list
it may take from: taking one token a call, a worker of K queues sent O(K) bytes a task, and
starting over K one-task queues cost O(K^2). This takes up to n tokens in one call (the worker's n
grows with K, so such a start is O(K)). The lists are looked at in the order given (the worker's
weighted order), a chunk at a time: one EXISTS tells how many lists of a chunk hold a token, and a
chunk that holds few is halved (one EXISTS a half: the other half holds the rest) down to a few
lists or a dense stretch (a token in more than a quarter of its lists), whose lists are popped
one after the other until its tokens are taken (at most one token waits in a list:
includes/signal). A poll that finds nothing costs one EXISTS per chunk; one whose lists are dense
(a start over many queues) pops ~4 lists a token, not the O(chunk) keys of halving to each.
KEY lists...     the wake lists, in the order their tokens are taken
ARG n            the most tokens to take
Returns the 1-based positions, among the lists given, of those whose token was taken.
]]
local n = tonumber(A.n)
local lists, out = K.lists, {}

local function held(lo, hi)  -- how many of lists lo..hi exist (hold a token)
  local names = {}
  for i = lo, hi do
    names[#names + 1] = lists[i]
  end
  return redis.call('EXISTS', unpack(names))
end

local function take(lo, hi, c)  -- lists lo..hi hold c tokens
  if c <= 0 or #out >= n then
    return
  end
  if hi - lo < 8 or c * 4 > hi - lo then  -- few lists, or dense: pop each, up to the c held
    local got = 0
    for i = lo, hi do
      if #out >= n or got >= c then
        return
      end
      if redis.call('LPOP', lists[i]) then
        out[#out + 1] = i
        got = got + 1
      end
    end
    return
  end
  local mid = math.floor((lo + hi) / 2)
  local low = held(lo, mid)
  take(lo, mid, low)
  take(mid + 1, hi, c - low)
end

local total, chunk, first = lists.n, 1000, 1
while first <= total and #out < n do
  local last = math.min(first + chunk - 1, total)
  take(first, last, held(first, last))
  first = last + 1
end
return out
