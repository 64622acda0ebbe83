import Foundation
import SignetCore
import SignetCrypto

extension TUFClient {
    /// The transparency policy the trusted root carries (`custom.signet.tlog`, FORMAT.md §10),
    /// nil when it carries none. A policy that does not read is the root's error: refused.
    package func logPolicy() throws -> TransparencyPolicy? {
        guard let value = trusted.root.metadata.signed["custom"]?["signet"]?["tlog"] else { return nil }
        guard let text = value.stringValue else {
            throw SignetError(.malformedMetadata, "the root's custom.signet.tlog is not a string (a tlog-policy)", path: "root.json")
        }
        do {
            return try TransparencyPolicy(text: text)
        } catch let error as SignetError {
            throw SignetError(.malformedMetadata, "the root's custom.signet.tlog: \(error.reason)", path: "root.json")
        }
    }

    /// A file of the log (or a proof) through the client's transport: nil when absent.
    package func fetchLogFile(_ url: String, limit: Int, what: String) throws -> [UInt8]? {
        switch try fetcher.get(url, limit: limit, what: what) {
        case .found(let bytes): return bytes
        case .absent: return nil
        }
    }

    /// The largest checkpoint of the log `origin` this device verified, as its signed note.
    package func storedCheckpoint(origin: String) throws -> [UInt8]? {
        try Self.readStored(Self.checkpointName(origin), in: options.metadataDirectory, limit: SignedNote.largestNote)
    }

    /// Keeps `note`, a verified checkpoint of `origin` larger than the stored one (nothing in a
    /// read-only check).
    package func storeCheckpoint(origin: String, note: [UInt8]) throws {
        if options.readOnly { return }
        try AtomicFile.write(note, to: options.metadataDirectory + "/" + Self.checkpointName(origin), mode: 0o644, replace: true)
    }

    static func checkpointName(_ origin: String) -> String { TransparencyVerifier.checkpointFileName(origin) }
}
