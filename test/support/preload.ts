// Loaded before every test file (bunfig.toml). Tests talk to real Postgres and MQTT and some
// wait for a broker restart or a relay round trip: 5 s is too tight on a loaded 2-core box.
import { setDefaultTimeout } from "bun:test";

setDefaultTimeout(30_000);
