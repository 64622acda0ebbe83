import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif
import SignetCore
import SignetCrypto

/// Reads an XML property list (`<plist version="1.0">`) strictly into a ``StructuredValue``:
/// only the plist elements, one value, no duplicate keys in a dictionary, no entity
/// declarations (so no expansion bombs), nothing but white space between elements, nesting at
/// most ``StructuredFormat/maximumDepth`` deep.
package enum XMLPropertyList {
    static func parse(_ bytes: [UInt8]) throws -> StructuredDocument {
        // Property lists are UTF-8. Foundation's XMLParser traps (a crash, found by the
        // `structured` fuzz target) when libxml2 hands it an element name that is not valid
        // UTF-8, so nothing that is not valid UTF-8, or declares another encoding, reaches it.
        guard String(validating: bytes, as: UTF8.self) != nil else {
            throw StructuredValue.ParseError("it is not a property list as Signet reads it: it is not valid UTF-8")
        }
        if let declaration = declaredEncoding(bytes), declaration.lowercased() != "utf-8" {
            throw StructuredValue.ParseError("it is not a property list as Signet reads it: it declares the encoding \(declaration); property lists are UTF-8")
        }
        // libxml2 expands entities declared in the document itself without telling the
        // delegate; property lists declare none, so a declaration anywhere is refused.
        if first(of: "<!ENTITY", in: bytes) != nil {
            throw StructuredValue.ParseError("it is not a property list as Signet reads it: it declares an entity (<!ENTITY); property lists have none")
        }
        // Nor processing instructions, other than the XML declaration at the very start:
        // XMLParser crashes (a NULL strlen, found by the fuzz target) on one without data
        // (`<?pi?>`), and a property list has none.
        let start = bytes.starts(with: Array("<?xml".utf8)) && bytes.count > 5 && [0x20, 0x09, 0x0D, 0x0A].contains(bytes[5]) ? 2 : 0
        if let at = first(of: "<?", in: bytes, from: start) {
            let line = bytes[..<at].reduce(1) { $1 == 0x0A ? $0 + 1 : $0 }
            throw StructuredValue.ParseError(
                "it is not a property list as Signet reads it: it holds a processing instruction (<?…?>, line \(line)); property lists have only the XML declaration at the start"
            )
        }
        let reader = Reader(size: bytes.count)
        // Fed in chunks from a stream: given all at once, libxml2 refuses a document over 10 MB
        // ("Huge input lookup", NSXMLParserErrorDomain 1), below the 16 MiB Signet accepts.
        // The document's own bytes, not a copy (the parser does not outlive this scope).
        let (parsed, failure): (Bool, String?) = bytes.withUnsafeBytes { raw in
            let data = Data(
                bytesNoCopy: UnsafeMutableRawPointer(mutating: raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!), count: raw.count, deallocator: .none)
            let parser = XMLParser(stream: InputStream(data: data))
            parser.shouldResolveExternalEntities = false
            parser.shouldProcessNamespaces = false
            parser.delegate = reader
            let parsed = parser.parse()
            let reason = parser.parserError.map { ($0 as NSError).localizedDescription } ?? "the XML does not parse"
            return (parsed, parsed ? nil : "\(reason) (line \(parser.lineNumber))")
        }
        if let refusal = reader.refusal { throw StructuredValue.ParseError("it is not a property list as Signet reads it: \(refusal) (line \(reader.line))") }
        guard parsed else {
            throw StructuredValue.ParseError("it is not well-formed XML: \(failure ?? "the XML does not parse")")
        }
        guard reader.done, reader.builder.isComplete else { throw StructuredValue.ParseError("it holds no <plist> value") }
        return reader.builder.document
    }

    /// Where `needle` first occurs in `bytes` at or after `start`.
    static func first(of needle: String, in bytes: [UInt8], from start: Int = 0) -> Int? {
        let needle = Array(needle.utf8)
        guard bytes.count >= needle.count, start <= bytes.count - needle.count else { return nil }
        return (start...(bytes.count - needle.count)).first { bytes[$0] == needle[0] && bytes[$0..<$0 + needle.count].elementsEqual(needle) }
    }

    /// The `encoding="…"` of an XML declaration at the start of `bytes`, if any.
    package static func declaredEncoding(_ bytes: [UInt8]) -> String? {
        let head = String(decoding: bytes.prefix(256), as: UTF8.self)
        guard head.hasPrefix("<?xml"), let end = head.range(of: "?>") else { return nil }
        let declaration = head[..<end.lowerBound]
        guard let key = declaration.range(of: "encoding") else { return nil }
        let rest = declaration[key.upperBound...].drop { $0 == " " || $0 == "=" || $0 == "\t" }
        guard let quote = rest.first, quote == "\"" || quote == "'" else { return nil }
        return String(rest.dropFirst().prefix { $0 != quote })
    }

    /// Appends the values to a ``StructuredDocument/Builder`` in document order: a container
    /// when its element starts, a scalar when its element ends.
    private final class Reader: NSObject, XMLParserDelegate {
        enum Kind: Equatable {
            case plist
            case array
            case dictionary
            case text(String)
            case empty(Bool)
        }
        struct Frame {
            let kind: Kind
            /// A dictionary's keys so far, as bytes (NFC and NFD twins are two keys).
            var keys = Set<[UInt8]>()
            /// A dictionary's key whose value has not come yet.
            var key: String?
            var text = ""
            /// Whether `<plist>` holds its value.
            var hasValue = false
        }
        var stack: [Frame] = []
        var builder: StructuredDocument.Builder

        init(size: Int) { builder = StructuredDocument.Builder(reserving: size) }
        var done = false
        var refusal: String?
        var line = 0

        private func refuse(_ parser: XMLParser, _ reason: String) {
            guard refusal == nil else { return }
            refusal = reason
            line = parser.lineNumber
            parser.abortParsing()
        }

        func parser(_ parser: XMLParser, didStartElement name: String, namespaceURI: String?, qualifiedName: String?, attributes: [String: String] = [:]) {
            guard refusal == nil else { return }
            guard stack.count < StructuredFormat.maximumDepth else {
                return refuse(parser, "it is nested more than \(StructuredFormat.maximumDepth) levels deep")
            }
            guard !stack.isEmpty else {
                guard name == "plist", !done else { return refuse(parser, "the document element is <\(name)>, not <plist>") }
                stack.append(Frame(kind: .plist))
                return
            }
            let top = stack.count - 1
            switch stack[top].kind {
            case .text, .empty: return refuse(parser, "<\(name)> inside a value that holds text")
            case .dictionary where stack[top].key == nil && name != "key":
                return refuse(parser, "<\(name)> in a <dict> where a <key> must come")
            case .dictionary where stack[top].key != nil && name == "key":
                return refuse(parser, "two <key>s in a row in a <dict>")
            case .plist where stack[top].hasValue:
                return refuse(parser, "<plist> holds more than one value")
            default: break
            }
            switch name {
            case "dict", "array":
                builder.begin(dictionary: name == "dict")
                stack.append(Frame(kind: name == "dict" ? .dictionary : .array))
            case "key", "string", "integer", "real", "date", "data": stack.append(Frame(kind: .text(name)))
            case "true": stack.append(Frame(kind: .empty(true)))
            case "false": stack.append(Frame(kind: .empty(false)))
            default: refuse(parser, "<\(name)> is not a property list element")
            }
        }

        func parser(_ parser: XMLParser, foundCharacters string: String) {
            guard refusal == nil else { return }
            if !stack.isEmpty, case .text = stack[stack.count - 1].kind {
                stack[stack.count - 1].text.append(string)
            } else if !string.allSatisfy({ $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" || $0 == "\r\n" }) {
                refuse(parser, "text outside a value")
            }
        }

        func parser(_ parser: XMLParser, foundCDATA block: Data) {
            guard let text = String(data: block, encoding: .utf8) else { return refuse(parser, "a CDATA section that is not UTF-8") }
            if !stack.isEmpty, case .text = stack[stack.count - 1].kind {
                stack[stack.count - 1].text.append(text)
            } else {
                refuse(parser, "text outside a value")
            }
        }

        func parser(_ parser: XMLParser, didEndElement name: String, namespaceURI: String?, qualifiedName: String?) {
            guard refusal == nil, let top = stack.popLast() else { return }
            switch top.kind {
            case .plist:
                guard top.hasValue else { return refuse(parser, "<plist> holds no value") }
                done = true
                return
            case .array: builder.end()
            case .dictionary:
                guard top.key == nil else { return refuse(parser, "<key>\(top.key!)</key> has no value") }
                builder.end()
            case .empty(let flag): builder.bool(flag)
            case .text("key"):
                let parent = stack.count - 1
                guard parent >= 0, stack[parent].kind == .dictionary, stack[parent].key == nil else { return refuse(parser, "<key> outside a <dict>") }
                guard stack[parent].keys.insert(Array(top.text.utf8)).inserted else {
                    return refuse(parser, "the key \"\(top.text)\" appears twice in one <dict>")
                }
                stack[parent].key = top.text
                builder.key(top.text)
                return
            case .text("string"): builder.string(top.text)
            case .text("integer"):
                let trimmed = top.text.trimmingCharacters(in: .whitespacesAndNewlines)
                guard let integer = StructuredValue.canonicalInteger(Substring(trimmed)) else {
                    return refuse(parser, "<integer>\(trimmed.prefix(40))</integer> is not a whole number")
                }
                builder.number(integer)
            case .text("real"):
                let trimmed = top.text.trimmingCharacters(in: .whitespacesAndNewlines)
                // Decimal text is kept exactly; nan and inf, which have no decimal form, as doubles.
                if let number = StructuredValue.canonicalNumber(Substring(trimmed)) {
                    builder.number(number)
                } else if let real = Double(trimmed), !real.isFinite {
                    builder.real(real)
                } else {
                    return refuse(parser, "<real>\(trimmed.prefix(40))</real> is not a number")
                }
            case .text("date"):
                let trimmed = top.text.trimmingCharacters(in: .whitespacesAndNewlines)
                guard let date = ISO8601DateFormatter().date(from: trimmed) else {
                    return refuse(parser, "<date>\(trimmed.prefix(40))</date> is not an ISO 8601 UTC time")
                }
                builder.date(date.timeIntervalSinceReferenceDate)
            case .text: // data
                let base64 = top.text.filter { !($0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" || $0 == "\r\n") }
                guard let data = Data(base64Encoded: base64) else { return refuse(parser, "<data> is not base64") }
                builder.data(Array(data))
            }
            // The value just made belongs to its parent.
            guard !stack.isEmpty else { return refuse(parser, "a value outside <plist>") }
            let index = stack.count - 1
            switch stack[index].kind {
            case .plist: stack[index].hasValue = true
            case .array: break
            case .dictionary where stack[index].key != nil: stack[index].key = nil
            default: refuse(parser, "a value outside <plist>")
            }
        }

        func parser(_ parser: XMLParser, foundInternalEntityDeclarationWithName name: String, value: String?) {
            refuse(parser, "it declares the entity \(name); property lists have none")
        }

        func parser(_ parser: XMLParser, foundExternalEntityDeclarationWithName name: String, publicID: String?, systemID: String?) {
            refuse(parser, "it declares the entity \(name); property lists have none")
        }

        func parser(_ parser: XMLParser, resolveExternalEntityName name: String, systemID: String?) -> Data? {
            refuse(parser, "it refers to the external entity \(name)")
            return nil
        }
    }
}
