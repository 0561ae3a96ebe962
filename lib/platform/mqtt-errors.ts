// Reading mqtt.js errors: the reason code is the value to branch on, the message is for people.

/** The MQTT reason code an mqtt.js error carries (a PUBACK's or a CONNACK's), if any. */
export function reasonCodeOf(error: unknown): number | undefined {
  if (typeof error !== "object" || error === null) return undefined;
  const code = (error as { code?: unknown }).code;
  return typeof code === "number" ? code : undefined;
}

export function describeMqttError(error: unknown): string {
  const code = reasonCodeOf(error);
  const message = error instanceof Error ? error.message : String(error);
  return code === undefined ? message : `reason 0x${code.toString(16).padStart(2, "0")}: ${message}`;
}
