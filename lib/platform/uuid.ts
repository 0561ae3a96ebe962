import { v7 as uuidV7 } from "uuid";

// The hyphenated 8-4-4-4-12 hexadecimal UUID form (any version, either case): what the API
// accepts as a key or an id, what the relay sends as an event id, what ops commands take.
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function isUuid(value: string): boolean {
  return UUID_RE.test(value);
}

/**
 * A new event id (the outbox row's primary key): a time-ordered UUID (version 7, RFC 9562),
 * increasing within this process. Each write lands at the right-hand edge of the outbox's
 * primary key instead of on a random leaf, and so does the relay's mark, which adds a second
 * entry for every row it publishes (the update is not HOT). The time it carries is the event's
 * own creation, which the envelope's createdAt states anyway.
 */
export function newEventId(): string {
  return uuidV7();
}
