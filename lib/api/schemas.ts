// The schemas moved to lib/shared/schemas.ts (operations are declared where every process may import them).
export * from "../shared/schemas.ts";
