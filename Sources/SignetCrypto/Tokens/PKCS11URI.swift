import SignetCore
/// An RFC 7512 PKCS#11 URI naming a private key on a token:
/// `pkcs11:token=release;object=signing-2026` (also `id=`, `serial=`, `manufacturer=`, `model=`,
/// `slot-id=`), with the query attributes `pin-source=` and `module-path=`.
///
/// Strict: an attribute Signet does not know is refused (a misspelt `objcet=` must not select
/// some other key), except the `x-` vendor attributes RFC 7512 lets consumers ignore; each
/// attribute at most once; percent-encoding decoded (`id=%01%02`). `pin-value=` is refused:
/// a PIN on the command line is visible to every user of the machine (`ps`, shell history).
public struct PKCS11URI: Sendable, Equatable, CustomStringConvertible {
    /// `token=`: the token's label.
    public var token: String?
    /// `serial=`: the token's serial number.
    public var serial: String?
    /// `manufacturer=`: the token's manufacturer.
    public var manufacturer: String?
    /// `model=`: the token's model.
    public var model: String?
    /// `slot-id=`: the slot, as a decimal number.
    public var slotID: UInt?
    /// `object=`: the key's label (CKA_LABEL).
    public var object: String?
    /// `id=`: the key's CKA_ID bytes.
    public var id: [UInt8]?
    /// `pin-source=`: a file holding the PIN (`file:/path` or `/path`).
    public var pinSource: String?
    /// `module-path=`: the PKCS#11 module to load.
    public var modulePath: String?
    /// The text it was parsed from.
    public let text: String

    /// Parses `text`.
    ///
    /// - Throws: ``/SignetCore/SignetError`` `.usage` naming what is wrong: not a `pkcs11:` URI, an unknown or
    ///   repeated attribute, bad percent-encoding, `pin-value=`, `type=` other than `private`.
    ///
    /// With `requiringKey` false, a URI naming only a token (`pkcs11:token=release`) is
    /// accepted: what `signet key show` takes to list the token's keys.
    public init(_ text: String, requiringKey: Bool = true) throws {
        self.text = text
        func refuse(_ reason: String) -> SignetError {
            SignetError(.usage, "the PKCS#11 URI '\(PKCS11URI.redacted(text))' \(reason)")
        }
        guard text.hasPrefix("pkcs11:") else {
            throw SignetError(.usage, "a PKCS#11 URI starts with pkcs11: (the value given does not, and is not repeated here in case it holds a PIN)")
        }
        let rest = text.dropFirst("pkcs11:".count)
        let parts = rest.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        let path = parts[0]
        let query = parts.count > 1 ? parts[1] : ""
        var seen = Set<String>()
        func attributes(_ part: Substring, separator: Character) throws -> [(name: String, value: String, bytes: [UInt8])] {
            try part.split(separator: separator, omittingEmptySubsequences: true).map { pair in
                guard let equals = pair.firstIndex(of: "=") else { throw refuse("has an attribute without '=' (attributes are name=value)") }
                let name = String(pair[..<equals]).lowercased()
                // A PIN belongs in no part of the URI, also not in the path.
                if name == "pin-value" {
                    throw SignetError(
                        .usage,
                        "a PKCS#11 URI with pin-value= puts the PIN on the command line, where any user of this machine can read it; use pin-source=file:/path/to/pin, --passphrase-file FILE or --passphrase-env VAR"
                    )
                }
                guard seen.insert(name).inserted else { throw refuse("gives \(name)= twice") }
                guard let value = PKCS11URI.percentDecoded(pair[pair.index(after: equals)...]) else {
                    throw refuse("has a bad percent-encoding in \(name)= (use %XX with two hex digits)")
                }
                guard let string = value.string ?? (name == "id" ? "" : nil) else {
                    throw refuse("has \(name)= that is not UTF-8 text once decoded")
                }
                return (name, string, value.bytes)
            }
        }
        for (name, value, bytes) in try attributes(path, separator: ";") {
            switch name {
            case "token": token = value
            case "serial": serial = value
            case "manufacturer": manufacturer = value
            case "model": model = value
            case "object": object = value
            case "id": id = bytes // bytes, not text
            case "slot-id":
                guard let number = UInt(value) else { throw refuse("has slot-id=\(value), which is not a decimal number") }
                slotID = number
            case "type":
                guard value == "private" else { throw refuse("has type=\(value); signing needs a private key (type=private, or leave type out)") }
            case "library-manufacturer", "library-description", "library-version", "slot-description", "slot-manufacturer":
                break // Describe the module or slot; the module is chosen by path and the token matched below.
            case let vendor where vendor.hasPrefix("x-"):
                break
            case "pin-source":
                throw refuse("has pin-source= in its path; it belongs in the query: pkcs11:token=…;object=…?pin-source=file:/path/to/pin")
            default:
                throw refuse("has the attribute \(name)=, which Signet does not know (token, object, id, serial, manufacturer, model, slot-id, type)")
            }
        }
        for (name, value, _) in try attributes(query, separator: "&") {
            switch name {
            case "pin-source":
                pinSource = value.hasPrefix("file:") ? String(value.dropFirst("file:".count)).replacingPrefix("//", with: "") : value
                guard pinSource?.hasPrefix("/") == true || pinSource?.isEmpty == false else { throw refuse("has an empty pin-source=") }
            case "module-path": modulePath = value
            case "module-name":
                throw refuse("names a module by module-name=; give its path with module-path=, --pkcs11-module or SIGNET_PKCS11_MODULE")
            case let vendor where vendor.hasPrefix("x-"):
                break
            default:
                throw refuse("has the query attribute \(name)=, which Signet does not know (pin-source, module-path)")
            }
        }
        guard object != nil || id != nil || !requiringKey else {
            throw refuse("names no key: add object=LABEL or id=%XX%XX (signet key show '\(PKCS11URI.redacted(text))' lists the token's keys)")
        }
    }

    public var description: String { PKCS11URI.redacted(text) }

    /// `text` as a path attribute's value: every byte but letters, digits and `-._~`
    /// percent-encoded (RFC 7512 §2.3).
    static func percentEncoded(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                out += String(format: "%%%02X", byte)
            }
        }
        return out
    }

    /// The URI as messages show it: the query's values and the value of every path attribute
    /// that is not a known, harmless one (token, object, id…) replaced by `…`, and a part without
    /// `=` by `…` (never echo what may be a PIN, wherever it was put).
    static func redacted(_ text: String) -> String {
        guard text.hasPrefix("pkcs11:") else { return "pkcs11:…" }
        let shown: Set<String> = [
            "token", "serial", "manufacturer", "model", "object", "id", "slot-id", "type",
            "library-manufacturer", "library-description", "library-version", "slot-description", "slot-manufacturer"
        ]
        let rest = text.dropFirst("pkcs11:".count)
        let parts = rest.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        let path = parts[0].split(separator: ";", omittingEmptySubsequences: false).map { pair -> String in
            guard let equals = pair.firstIndex(of: "=") else { return pair.isEmpty ? "" : "…" }
            let name = String(pair[..<equals])
            return shown.contains(name.lowercased()) ? String(pair) : name + "=…"
        }.joined(separator: ";")
        guard parts.count > 1 else { return "pkcs11:" + path }
        let names = parts[1].split(separator: "&").map { pair -> String in
            guard let equals = pair.firstIndex(of: "=") else { return "…" }
            return String(pair[..<equals]) + "=…"
        }
        return "pkcs11:" + path + "?" + names.joined(separator: "&")
    }

    /// Percent-decodes `text`: the bytes, and the string when they are UTF-8. Nil for a `%`
    /// without two hex digits after it.
    static func percentDecoded(_ text: Substring) -> (bytes: [UInt8], string: String?)? {
        var bytes: [UInt8] = []
        var iterator = Array(text.utf8).makeIterator()
        func hex(_ byte: UInt8?) -> UInt8? {
            guard let byte else { return nil }
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
            default: return nil
            }
        }
        while let byte = iterator.next() {
            if byte == UInt8(ascii: "%") {
                guard let high = hex(iterator.next()), let low = hex(iterator.next()) else { return nil }
                bytes.append(high << 4 | low)
            } else {
                bytes.append(byte)
            }
        }
        return (bytes, String(validating: bytes, as: UTF8.self))
    }
}

private extension String {
    func replacingPrefix(_ prefix: String, with replacement: String) -> String {
        hasPrefix(prefix) ? replacement + dropFirst(prefix.count) : self
    }
}
