// `node --import ./bench/write-scope-sync.mjs …`: see write-scope-sync-hooks.mjs.
import { register } from 'node:module';

register('./write-scope-sync-hooks.mjs', import.meta.url);
