import SignetCore

/// A release as a transparency log holds it (FORMAT.md §10, `signet.release/v1`): name,
/// version, sequence, the signed manifest's SHA-256, the package's SHA-256 and length, one
/// `key value` line each, in that order, each ended by a newline, nothing else.
public struct ReleaseEntry: Sendable, Equatable {
    public let name: String
    public let version: String
    public let sequence: UInt64
    /// Lowercase hex.
    public let manifestSHA256: String
    public let targetSHA256: String
    public let targetLength: UInt64

    static let header = "signet.release/v1"
    static let keys = ["name", "version", "sequence", "manifest-sha256", "target-sha256", "target-length"]

    /// A release's entry; refuses a name or version that is empty or has a control character
    /// (a log line cannot hold it), and digests that are not 64 hex digits.
    public init(name: String, version: String, sequence: UInt64, manifestSHA256: String, targetSHA256: String, targetLength: UInt64) throws {
        for (key, value) in [("name", name), ("version", version)]
        where value.isEmpty || value.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7f }) {
            throw SignetError(.malformedMetadata, "the release's \(key) '\(value.debugDescription)' is empty or has a control character: it has no log entry")
        }
        for (key, value) in [("manifest", manifestSHA256), ("package", targetSHA256)]
        where value.utf8.count != 64 || !value.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) || ($0 >= 0x41 && $0 <= 0x46) }) {
            throw SignetError(.malformedMetadata, "the release's \(key) SHA-256 '\(value.prefix(80))' is not 64 hex digits: it has no log entry")
        }
        (self.name, self.version, self.sequence) = (name, version, sequence)
        (self.manifestSHA256, self.targetSHA256, self.targetLength) = (manifestSHA256.lowercased(), targetSHA256.lowercased(), targetLength)
    }

    /// Reads an entry's bytes: exactly the lines above (a leading zero, an upper-case digit, a
    /// line more or less, or another order is not an entry, `.notLogged`).
    public init(_ bytes: [UInt8]) throws {
        func refuse(_ why: String) -> SignetError { SignetError(.notLogged, "not a release's log entry (signet.release/v1): \(why)") }
        guard let text = String(validating: bytes, as: UTF8.self), text.hasSuffix("\n") else { throw refuse("not UTF-8 text ending with a newline") }
        let lines = text.dropLast().split(separator: "\n", omittingEmptySubsequences: false)
        guard lines.count == 7, lines[0] == Self.header else { throw refuse("not seven lines under \(Self.header)") }
        var values: [String] = []
        for (line, key) in zip(lines.dropFirst(), Self.keys) {
            guard line.hasPrefix(key + " ") else { throw refuse("a line is not '\(key) VALUE'") }
            values.append(String(line.dropFirst(key.count + 1)))
        }
        func number(_ text: String) throws -> UInt64 {
            guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), text == "0" || !text.hasPrefix("0"), let value = UInt64(text) else {
                throw refuse("'\(text.prefix(30))' is not a decimal number")
            }
            return value
        }
        do {
            try self.init(
                name: values[0], version: values[1], sequence: try number(values[2]), manifestSHA256: values[3], targetSHA256: values[4],
                targetLength: try number(values[5]))
        } catch let error as SignetError where error.code == .malformedMetadata {
            throw refuse(error.reason)
        }
        guard self.bytes == bytes else { throw refuse("it is not written as Signet writes entries (lowercase digests)") }
    }

    /// The entry's bytes.
    public var bytes: [UInt8] {
        let values = [name, version, String(sequence), manifestSHA256, targetSHA256, String(targetLength)]
        return Array(([Self.header] + zip(Self.keys, values).map { "\($0) \($1)" }).map { $0 + "\n" }.joined().utf8)
    }

    /// Its leaf hash (RFC 6962: SHA-256 of 0x00 and the entry).
    public var leafHash: [UInt8] { TileTree.leafHash(bytes) }
}
