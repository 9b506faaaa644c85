// Shifts a Node.js program's wall clock: `node --require shifted_clock.cjs program.js`.
//
// PPLX_NB_CLOCK_OFFSET_MS (may be negative) is added to Date.now(), to `new Date()` and to
// `Date()`, so a program started with an offset of ten minutes believes every timestamp written
// by another process is ten minutes older than it is. Explicit dates (`new Date(ms)`,
// `Date.parse`) and timers (setTimeout, setInterval, performance.now) are left alone, as a
// real clock error leaves them.
"use strict";

const offset = Number(process.env.PPLX_NB_CLOCK_OFFSET_MS || "0");
if (!Number.isFinite(offset)) {
  throw new Error(`PPLX_NB_CLOCK_OFFSET_MS must be a number of milliseconds, got ${offset}`);
}

if (offset !== 0) {
  const RealDate = Date;
  const realNow = RealDate.now.bind(RealDate);
  const shiftedNow = () => realNow() + offset;
  globalThis.Date = new Proxy(RealDate, {
    construct(target, args, newTarget) {
      return Reflect.construct(target, args.length === 0 ? [shiftedNow()] : args, newTarget);
    },
    apply() {
      return new RealDate(shiftedNow()).toString();
    },
    get(target, property, receiver) {
      return property === "now" ? shiftedNow : Reflect.get(target, property, receiver);
    },
  });
}
