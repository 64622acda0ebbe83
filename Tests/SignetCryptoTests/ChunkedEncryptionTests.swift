import Foundation
import SignetCore
import SignetCryptoTestSupport
import SignetTestSupport
import Testing

@testable import SignetCrypto

/// c2sp.org/chunked-encryption (FORMAT.md §8): sizes at each chunk edge, an independent
/// implementation from the specification's text (PyPI cryptography) both ways, and every way a
/// sealed message can be altered.
@Suite("Chunked encryption (c2sp.org/chunked-encryption, AES-256-GCM)")
struct ChunkedEncryptionTests {
    static let key = (0..<32).map { UInt8($0) }
    static let salt = (0..<24).map { UInt8(100 + $0) }
    static let context = Array("firmware/app.bin".utf8)
    static let sizes = [0, 1, 16_383, 16_384, 16_385, 32_768, 50_000]

    static func message(_ count: Int) -> [UInt8] {
        var generator = SplitMix64(seed: UInt64(count))
        return randomBytes(count, using: &generator)
    }

    @Test("each size round-trips, the sealed size is 56 + size + 16 per chunk, and a streamed seal equals a whole one")
    func roundTrip() throws {
        for size in Self.sizes {
            let message = Self.message(size)
            let sealed = try ChunkedSealer.seal(message, inputKey: Self.key, context: Self.context, salt: Self.salt)
            #expect(UInt64(sealed.count) == ChunkedEncryption.sealedSize(plaintext: UInt64(size)), "\(size)")
            #expect(sealed.count == 56 + size + 16 * (size / 16_384 + 1), "\(size)")
            #expect(ChunkedEncryption.plaintextSize(sealed: UInt64(sealed.count)) == UInt64(size))
            #expect(try ChunkedOpener.open(sealed, inputKey: Self.key, context: Self.context, name: "m") == message, "\(size)")
            // Streamed in uneven pieces.
            var sealer = try ChunkedSealer(inputKey: Self.key, context: Self.context, salt: Self.salt)
            var streamed = sealer.header
            var offset = 0
            for piece in [1, 7_000, 20_000, 100_000] where offset < size {
                let end = min(size, offset + piece)
                streamed += try sealer.append(message[offset..<end])
                offset = end
            }
            streamed += try sealer.append(message[offset...]) + sealer.finish()
            #expect(streamed == sealed, "\(size)")
        }
        // A fresh salt each time: two seals of one message differ.
        let one = try ChunkedSealer.seal([1, 2, 3], inputKey: Self.key, context: Self.context)
        let two = try ChunkedSealer.seal([1, 2, 3], inputKey: Self.key, context: Self.context)
        #expect(one != two)
    }

    @Test("Signet and an implementation written from the specification with PyPI cryptography seal the same bytes and open each other's")
    func independentPeer() throws {
        let work = try TemporaryDirectory()
        let script = try work.write("chunked.py", Data(pythonScript("chunked_encryption.py").utf8))
        let keyHex = Self.key.hexString, saltHex = Self.salt.hexString
        for size in Self.sizes {
            let message = Self.message(size)
            let plain = try work.write("m\(size)", Data(message))
            let theirs = work.file("s\(size)")
            let sealed = try run("python3", [script, "seal", keyHex, saltHex, "firmware/app.bin", plain, theirs])
            #expect(sealed.status == 0, "\(sealed.stderr)")
            let ours = try ChunkedSealer.seal(message, inputKey: Self.key, context: Self.context, salt: Self.salt)
            #expect(try [UInt8](contents(theirs)) == ours, "the same bytes for \(size)")
            // Each opens the other's: ours with a fresh salt, through Python.
            let fresh = try ChunkedSealer.seal(message, inputKey: Self.key, context: Self.context)
            let freshPath = try work.write("f\(size)", Data(fresh))
            let opened = try run("python3", [script, "open", keyHex, "firmware/app.bin", freshPath, work.file("o\(size)")])
            #expect(opened.status == 0, "\(opened.stderr)")
            #expect(try [UInt8](contents(work.file("o\(size)"))) == message, "\(size)")
            #expect(try ChunkedOpener.open([UInt8](contents(theirs)), inputKey: Self.key, context: Self.context, name: "m") == message)
        }
    }

    @Test("a chunk swapped, duplicated, dropped, cut or flipped; a bad commitment; another path, key or salt; a full final chunk: each refused")
    func hostile() throws {
        let message = Self.message(3 * 16_384 + 100) // four chunks: three full, one of 100 bytes
        let sealed = try ChunkedSealer.seal(message, inputKey: Self.key, context: Self.context, salt: Self.salt)
        let full = ChunkedEncryption.sealedChunkSize
        func chunk(_ k: Int) -> [UInt8] {
            let start = 56 + k * full
            return Array(sealed[start..<min(sealed.count, start + full)])
        }
        let header = Array(sealed[0..<56])
        func refused(_ bytes: [UInt8], key: [UInt8] = Self.key, context: [UInt8] = Self.context, _ what: String) {
            let error = signetError { _ = try ChunkedOpener.open(bytes, inputKey: key, context: context, name: "m") }
            #expect(error?.code == .packageInvalid, "\(what): \(String(describing: error))")
        }
        refused(header + chunk(1) + chunk(0) + chunk(2) + chunk(3), "two chunks swapped")
        refused(header + chunk(0) + chunk(0) + chunk(2) + chunk(3), "a chunk in place of another")
        refused(header + chunk(0) + chunk(1) + chunk(2) + chunk(2) + chunk(3), "a chunk repeated")
        refused(header + chunk(0) + chunk(1) + chunk(2), "the final chunk dropped (ends in a full chunk: truncated)")
        refused(header + chunk(0) + chunk(1) + chunk(3), "a middle chunk dropped")
        refused(Array(sealed.dropLast(1)), "one byte cut")
        refused(Array(sealed.dropLast(101)), "the final chunk cut below its tag")
        refused(sealed + [0], "a byte appended")
        refused(Array(sealed[0..<40]), "shorter than a header")
        for offset in [0, 30, 56, 56 + 5_000, sealed.count - 1] {
            var flipped = sealed
            flipped[offset] ^= 0x01
            refused(flipped, "a bit flipped at \(offset)")
        }
        refused(sealed, context: Array("firmware/other.bin".utf8), "another path")
        refused(sealed, key: Self.key.map { $0 ^ 0xff }, "another key")
        // A message whose length is a multiple of 16 KiB ends in an empty chunk; one sealed
        // without it (a full final chunk) reads as truncated.
        let even = Self.message(2 * 16_384)
        let evenSealed = try ChunkedSealer.seal(even, inputKey: Self.key, context: Self.context, salt: Self.salt)
        refused(Array(evenSealed.dropLast(16)), "a final chunk of full length")
        // The same message under another salt cannot take the first salt's chunks.
        let other = try ChunkedSealer.seal(message, inputKey: Self.key, context: Self.context)
        refused(Array(other[0..<56]) + Array(sealed[56...]), "another message's header")
        // Random access: chunk 2 alone opens, and only as chunk 2.
        let opener = try ChunkedOpener(header: header, sealedSize: UInt64(sealed.count), inputKey: Self.key, context: Self.context, name: "m")
        #expect(try opener.open(chunk(2), chunk: 2, name: "m") == Array(message[(2 * 16_384)..<(3 * 16_384)]))
        #expect(signetError { _ = try opener.open(chunk(2), chunk: 1, name: "m") }?.code == .packageInvalid)
        #expect(signetError { _ = try opener.open(chunk(3), chunk: 2, name: "m") }?.code == .packageInvalid, "a short chunk where a full one belongs")
    }
}

/// A small deterministic generator for test data (SplitMix64).
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
