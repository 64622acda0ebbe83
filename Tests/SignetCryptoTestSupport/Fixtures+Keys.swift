import Foundation
import SignetCore
import SignetCrypto
import SignetTestSupport

/// The key fixtures as the library reads them.
extension Fixtures {
    public static var passphrase: PassphraseSource { .file(key("passphrase.txt")) }

    public static func signingKey() throws -> PrivateKey {
        try PrivateKey(contentsOf: key("rsa2048-pkcs8.pem"))
    }

    public static func trust(_ names: String...) throws -> TrustPolicy {
        try TrustPolicy(publicKeyFiles: names.map(key))
    }
}

/// Runs `body` and returns the SignetError it threw, or nil if it did not throw one.
public func signetError(_ body: () throws -> Void) -> SignetError? {
    do {
        try body()
        return nil
    } catch let error as SignetError {
        return error
    } catch {
        return nil
    }
}
