// The schemas moved to lib/platform/schemas.ts (operations are declared where every process may import them).
export * from "../platform/schemas.ts";
