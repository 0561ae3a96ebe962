import { Validator } from "@seriousme/openapi-schema-validator";
const doc = JSON.parse(await Bun.file("/tmp/doc.json").text());
const v = new Validator();
console.log(JSON.stringify(await v.validate(doc)).slice(0, 2000));
