--- The producer entry: the admission every script storing a producer's new task goes through
--- (enqueue, enqueue_many, enqueue_keyed, enqueue_keyed_many), before the call's first write,
--- and the lone producer's quick path (enqueue_lone), which asks admit_plain whether any rule is
--- set at all. It is the one place of the rules a new task meets there: a new admission rule is
--- an edit of this include (admit_rules, and admit_plain's fields) and the rule's own include,
--- never of the five scripts (docs/internals-scripts.md "The producer entry").
--- The rules, in order:
---   the cap (includes/cap): a queue's, or a tenant's, bound on its pending tasks (refused, or the
---   oldest pending tasks dropped to make room).
--- A script counts what it adds, asks, stores its tasks, then closes:
--- A rule is a step of admit_rules: false (refuse the call whole: its refusal(conf, n) counts it and
--- gives the reply code) or its part of the ticket, which admit_done completes.
---   admit_news(): an empty count of the tasks a call adds: {n = 0, tenants = {tenant = how many}}.
---   admit_count(news, m, at): one more task, ``m`` its message (``at`` = 1) or its stored value
---     (``at`` = 2).
---   admit(k, pk, news): the rules' verdict. Reads only, except a refusal's counters. Returns
---     ``refusal, ticket``: refusal = the reply code the script returns at once, nothing else
---     written (its exception: core/model/errors.py REPLY_ERRORS), or nil; ticket = what admit_done
---     completes once the tasks are stored (nil: nothing). A call that adds nothing (every task
---     its own earlier write, sent again) is admitted as is.
---   admit_one(k, pk, id, m, check): admit for one task ``m``; a refusal only when the task is not
---     the call's own earlier write (includes/newtask new_id 'own': sent again, it reports success).
---   admit_plain(conf, tenant): for a script that names none of the keys a rule may need
---     (enqueue_lone: one new task, nothing to drop): whether no rule is set for a new task of
---     ``tenant`` (nil: none), read in one HMGET with the queue's events cap: ``true, cap``
---     (store it, nothing to complete), or ``false`` (a rule is set: the script writes nothing
---     and the task goes through a script that calls admit). Every rule's conf fields are read
---     here: a rule not named here would be skipped by that path.
---   admit_done(k, ticket): after the call stored its tasks (the cap's drop_oldest: the victims
---     archived, includes/exit).
--- ``k``: the script's K (tasks, archived, the @exit group: a dropped task ends), ``pk``: G.pending.
--- @include "newtask"
--- @include "cap"
local function admit_news()
  return {n = 0, tenants = {}}
end
local function admit_count(news, m, at)
  local tenant = msg_tenant(m, at)
  news.n = news.n + 1
  if tenant then
    news.tenants[tenant] = (news.tenants[tenant] or 0) + 1
  end
end
local function admit_rules(k, pk, news)  -- the ticket (nil: nothing to complete), or false and the refusal
  local victims = cap_gate(k.conf, pk, k.tasks, news)
  if victims == false then
    return false, cap_refuse
  end
  return victims and {cap = victims} or nil
end
local function admit(k, pk, news)
  if news.n == 0 then
    return nil, nil
  end
  local ticket, refuse = admit_rules(k, pk, news)
  if ticket == false then
    return refuse(k.conf, news.n), nil
  end
  return nil, ticket
end
local function admit_one(k, pk, id, m, check)
  local news = admit_news()
  admit_count(news, m, 1)
  local ticket, refuse = admit_rules(k, pk, news)
  if ticket == false then
    if new_id(k.tasks, id, m, check) ~= 'own' then
      return refuse(k.conf, 1), nil
    end
    return nil, nil
  end
  return nil, ticket
end
local function admit_plain(conf, tenant)
  local got
  if tenant then
    got = redis.call('HMGET', conf, 'events', 'cap', 'cap:' .. tenant)
  else
    got = redis.call('HMGET', conf, 'events', 'cap')
  end
  if got[2] or got[3] then  -- the cap's fields (includes/cap): the queue's, the tenant's
    return false
  end
  return true, tonumber(got[1]) or EVENTS_CAP
end
local function admit_done(k, ticket)
  if ticket and ticket.cap then
    cap_drop(k, ticket.cap)
  end
end
