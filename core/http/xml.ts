import { XMLParser, XMLValidator } from 'fast-xml-parser';
import { brandClass } from '../brand.js';
import { badRequest } from '../errors.js';

const parser = new XMLParser({
  ignoreAttributes: false,
  attributeNamePrefix: '@',
  // Values stay text (`01234` is not 1234); validation coerces them to what the schema declares.
  parseTagValue: false,
  parseAttributeValue: false,
  trimValues: true,
  processEntities: true,
  ignoreDeclaration: true,
  ignorePiTags: true,
});

/**
 * An XML request body. Handlers get this instead of a plain object: `root` names the document
 * element, `content` is that element parsed (attributes under `@name`, repeated elements as arrays).
 */
export class XmlDocument {
  private constructor(
    readonly raw: string,
    readonly root: string,
    readonly content: unknown,
  ) {}

  static parse(raw: string): XmlDocument {
    const check = XMLValidator.validate(raw);
    if (check !== true) {
      const { msg, line, col } = check.err;
      // The validator quotes what it could not take (a tag, a character, text): the error does not.
      throw badRequest(`Malformed XML body: ${msg.replace(/'[^']*'|"[^"]*"/g, '…')} (line ${line}, column ${col})`);
    }
    let tree: Record<string, unknown>;
    try {
      tree = parser.parse(raw) as Record<string, unknown>;
    } catch (err) {
      // The parser's own limits (e.g. how deeply tags nest) are the client's to fix.
      throw badRequest(`Malformed XML body: ${(err as Error).message.replace(/'[^']*'|"[^"]*"/g, '…')}`);
    }
    const roots = Object.keys(tree).filter((k) => !k.startsWith('?'));
    if (roots.length !== 1) throw badRequest('Malformed XML body: expected exactly one document element');
    const root = roots[0]!;
    return new XmlDocument(raw, root, tree[root] === '' ? {} : tree[root]);
  }

  /** Value at a dotted path below the document element, e.g. `get('spec.replicas')`. */
  get(path: string): unknown {
    let node: unknown = this.content;
    for (const part of path.split('.')) {
      if (!node || typeof node !== 'object') return undefined;
      node = (node as Record<string, unknown>)[part];
    }
    return node;
  }
}

export function isXmlContentType(type: string | undefined): boolean {
  return !!type && /^(application|text)\/([\w.+-]+\+)?xml\b/i.test(type);
}
brandClass(XmlDocument, 'XmlDocument');
