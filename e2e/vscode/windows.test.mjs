// Two windows on one session: the second opens it from the sessions sidebar and sees the
// turn the first one runs, live.

import { test } from 'node:test';
import { Rig } from './harness.mjs';
import { connected, openSession, pickClaude, send, shows } from './workbench.mjs';

test('two windows on one session', async (t) => {
  const rig = await Rig.start(t, { signedIn: true });
  let passed = false;
  try {
    await rig.fake.push({ lastUserContains: 'First from window one' }, { text: 'Answer one.' });
    await rig.fake.push({ lastUserContains: 'Second from window one' }, { text: 'Answer two, seen by both.' });
    const one = await rig.browser.window(rig.codeServer.url());
    await rig.step('window one connects', () => connected(one));
    await rig.step('pick Claude', () => pickClaude(one));
    await rig.step('first turn', async () => {
      await send(one, 'First from window one');
      await shows(one, 'Answer one.');
    });
    const two = await rig.browser.window(rig.codeServer.url());
    await rig.step('window two connects', () => connected(two));
    await rig.step('window two opens the session', async () => {
      await openSession(two, 'First from window one');
      await shows(two, 'Answer one.');
    });
    await rig.step('a turn in window one shows in window two', async () => {
      await send(one, 'Second from window one');
      await shows(one, 'Answer two, seen by both.');
      await shows(two, 'Answer two, seen by both.');
    });
    passed = true;
  } finally {
    await rig.close(passed);
  }
});
