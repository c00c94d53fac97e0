--- The stored value of a task, the one place in lua/ that knows its layout (asynqpy/core/spine/stored.py
--- is the Python side): one field of its queue's tasks hash, ``state byte .. message``, or for an
--- active task ``'a' .. lease token (TOKEN_LEN bytes) .. message``. No script slices it by hand
--- (tests/test_exit_paths.py checks).
---   stored_state(v)         its state byte (p a s r x c g m w b; anything else if written by
---                           hand); nil when ``v`` is nil (no such task)
---   stored_msg(v)           the encoded message: after the state byte, and after the lease token
---                           of an active task
---   stored_token(v)         an active task's lease token (as stored)
---   stored_holds(v, token)  is ``v`` an active task leased with ``token``? (false for nil)
---   stored_msg_if(v, state)  the message of ``v`` if its state byte is ``state``, else nil (nil
---                           for nil): a state check and the message in one call
---   STORED_ACTIVE_AT        where the message starts in an active task's value (its byte index):
---                           to read its type in place (includes/events msg_type(v, at)), no copy
---   stored_at(v)            where the message starts in ``v`` (any state; no copy, no string made)
local TOKEN_LEN = 8
local STORED_ACTIVE_AT = 2 + TOKEN_LEN
local function stored_state(v)
  return v and string.sub(v, 1, 1)
end
local function stored_at(v)
  return string.byte(v, 1) == 97 and STORED_ACTIVE_AT or 2  -- (97: 'a')
end
local function stored_msg(v)
  if string.sub(v, 1, 1) == 'a' then
    return string.sub(v, 2 + TOKEN_LEN)
  end
  return string.sub(v, 2)
end
local function stored_token(v)
  return string.sub(v, 2, 1 + TOKEN_LEN)
end
local function stored_holds(v, token)  -- (the token compared in place: no string built for it)
  return v ~= nil and v ~= false and string.byte(v, 1) == 97 and #token == TOKEN_LEN
    and string.sub(v, 2, 1 + TOKEN_LEN) == token  -- (97: 'a')
end
local function stored_msg_if(v, state)
  if v and string.sub(v, 1, 1) == state then
    return string.sub(v, state == 'a' and 2 + TOKEN_LEN or 2)
  end
  return nil
end
