/// `.signet/signatures.sha256` (FORMAT.md §3): the SHA-256 of the signature installed for each
/// file, in the order of the manifest's `files`, after a one-line header. A tree check compares
/// each file's `user.signet.sig` with it and verifies the signature (RSA) only where they differ.
///
/// The index is not signed and need not be: a file's content is checked against the signed
/// manifest whatever the index says; the index only tells whether the attribute is still the
/// one unpack wrote. Someone who can rewrite it and the attribute could have them agree, but the
/// file still has to match the signed manifest byte for byte.
struct SignatureIndex {
    static let header = Array("signet-signatures/1 sha256\n".utf8)
    static let entrySize = 32

    private(set) var bytes: [UInt8] = SignatureIndex.header

    /// Records the signature of the next file.
    mutating func append(_ signature: [UInt8]) {
        // SHA-256 is always available (Digest checks it at start-up); an empty entry would only
        // make the check fall back to verifying this file's signature.
        let digest = (try? Digest.compute(signature, algorithm: .sha256).bytes) ?? [UInt8](repeating: 0, count: Self.entrySize)
        bytes += digest
    }

    /// A read index: its entries, if it has the header and one entry per listed file.
    struct Entries: Sendable {
        private let bytes: [UInt8]
        let count: Int

        init?(_ bytes: [UInt8], files: Int) {
            let header = SignatureIndex.header
            guard bytes.count >= header.count, bytes.prefix(header.count).elementsEqual(header),
                  (bytes.count - header.count) == files * SignatureIndex.entrySize else { return nil }
            self.bytes = Array(bytes.dropFirst(header.count))
            count = files
        }

        /// Whether `signature` is the one recorded for file number `index`.
        func matches(_ signature: [UInt8], at index: Int) -> Bool {
            guard index >= 0, index < count, let digest = try? Digest.compute(signature, algorithm: .sha256) else { return false }
            let start = index * SignatureIndex.entrySize
            return bytes[start..<start + SignatureIndex.entrySize].elementsEqual(digest.bytes)
        }
    }
}
