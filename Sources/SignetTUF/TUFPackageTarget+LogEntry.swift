import SignetCore
import SignetCrypto

extension TUFPackageTarget {
    /// The entry that stands for this release in a transparency log (FORMAT.md §10): what a
    /// device has verified of it before anything is fetched — name, version, sequence, the
    /// signed manifest's SHA-256, the package's SHA-256 and length — one `key value` line each
    /// under the line `signet.release/v1`. A value with a control character has no entry
    /// (`.malformedMetadata`): a log line cannot hold it.
    public func logEntry() throws -> [UInt8] {
        for (key, value) in [("name", name), ("version", version)]
        where value.isEmpty || value.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7f }) {
            throw SignetError(
                .malformedMetadata, "the release's \(key) '\(value.debugDescription)' is empty or has a control character: it has no log entry", path: target)
        }
        guard length >= 0 else { throw SignetError(.malformedMetadata, "the release's length \(length) is negative", path: target) }
        let lines = [
            "signet.release/v1", "name \(name)", "version \(version)", "sequence \(sequence)", "manifest-sha256 \(manifestSHA256.lowercased())",
            "target-sha256 \(sha256.lowercased())", "target-length \(length)"
        ]
        return Array(lines.map { $0 + "\n" }.joined().utf8)
    }

    /// The leaf hash of ``logEntry()`` (RFC 6962: SHA-256 of 0x00 and the entry).
    public func logLeafHash() throws -> [UInt8] { TileTree.leafHash(try logEntry()) }
}
