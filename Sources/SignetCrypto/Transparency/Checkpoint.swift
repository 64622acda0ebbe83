import SignetCore

/// A log's checkpoint (c2sp.org/tlog-checkpoint): the text a signed note carries — the log's
/// origin, its size in entries, the root hash of its tree of that size (base64), and any
/// extension lines.
public struct Checkpoint: Sendable, Equatable {
    public let origin: String
    public let size: UInt64
    /// The 32-byte RFC 6962 root hash of the first `size` entries.
    public let rootHash: [UInt8]
    public let extensions: [String]

    public init(origin: String, size: UInt64, rootHash: [UInt8], extensions: [String] = []) throws {
        guard !origin.isEmpty, !origin.contains("\n") else { throw Self.malformed("its origin is empty or has a newline") }
        guard rootHash.count == 32 else { throw Self.malformed("its root hash is \(rootHash.count) bytes, not 32") }
        guard extensions.allSatisfy({ !$0.isEmpty && !$0.contains("\n") }) else { throw Self.malformed("an extension line is empty") }
        self.origin = origin
        self.size = size
        self.rootHash = rootHash
        self.extensions = extensions
    }

    /// Reads a checkpoint from a note's text. The size is decimal without leading zeros and
    /// fits 64 bits; the hash is base64 of 32 bytes; every line ends with a newline.
    public init(text: String) throws {
        guard text.hasSuffix("\n") else { throw Self.malformed("it does not end with a newline") }
        let lines = text.dropLast().split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard lines.count >= 3 else { throw Self.malformed("it has fewer than three lines") }
        let digits = lines[1]
        guard !digits.isEmpty, digits.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), digits == "0" || !digits.hasPrefix("0"),
            let size = UInt64(digits)
        else { throw Self.malformed("its size '\(digits.prefix(40))' is not a decimal number of 64 bits without leading zeros") }
        guard let hash = [UInt8](base64: lines[2]) else { throw Self.malformed("its root hash is not base64") }
        try self.init(origin: lines[0], size: size, rootHash: hash, extensions: Array(lines[3...]))
    }

    /// The note text: origin, size, hash, extensions, each line ended by a newline.
    public var text: String {
        ([origin, String(size), rootHash.base64EncodedString()] + extensions).map { $0 + "\n" }.joined()
    }

    static func malformed(_ why: String) -> SignetError { SignetError(.malformedInput, "not a checkpoint: \(why) (c2sp.org/tlog-checkpoint)") }
}
